package acceptance

import (
	"context"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/mongostore"
)

// MongoDatabase is the database the in-process service uses with --store mongodb. Every run has its own
// keys, so runs can share it.
const MongoDatabase = "companion_acceptance"

// mongoStore opens the MongoDB store at uri for the in-process service.
func mongoStore(uri string) func(ctx context.Context) (items.Store, error) {
	return func(ctx context.Context) (items.Store, error) {
		return mongostore.Open(ctx, uri, MongoDatabase)
	}
}
