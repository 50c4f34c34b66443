package acceptance

import (
	"context"
	"errors"

	"github.com/replaysafe/companion/items"
)

// mongoStore opens the MongoDB store at uri for the in-process service.
func mongoStore(uri string) func(ctx context.Context) (items.Store, error) {
	return func(ctx context.Context) (items.Store, error) {
		return nil, errors.New("acceptance: the MongoDB store is not part of this build yet")
	}
}
