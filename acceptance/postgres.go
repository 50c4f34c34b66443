package acceptance

import (
	"context"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/pgstore"
)

// PostgresSchema is the schema the in-process service uses with --store postgres. Every run has its own
// keys, so runs can share it.
const PostgresSchema = "companion_acceptance"

// postgresStore opens the PostgreSQL store at url for the in-process service.
func postgresStore(url string) func(ctx context.Context) (items.Store, error) {
	return func(ctx context.Context) (items.Store, error) {
		return pgstore.Open(ctx, url, PostgresSchema)
	}
}
