package mongostore_test

import (
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/mongostore"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
)

// TestConformance runs the suite every store passes, each subtest on a fresh database: on the in-process
// FerretDB, or on the real MongoDB named by COMPANION_TEST_MONGODB_URI.
func TestConformance(t *testing.T) {
	opts := itemstest.Options{}
	if realURI() == "" {
		opts.ShortLoops = true
		opts.SkipConcurrency = "needs a real MongoDB (set " + mongotest.RealURIEnv + "): FerretDB v1, the test server here, " +
			"does not apply concurrent conditional updates atomically (more than one winner in 19 of 20 rounds of 50 callers)"
	}
	var envs sync.Map // *mongostore.Store → its env
	opts.DocumentBytes = func(t *testing.T, s items.Store, tenant, key string) int {
		e, _ := envs.Load(s)
		return docSize(t, e.(env), tenant, key)
	}
	itemstest.Exercise(t, func(t *testing.T) items.Store {
		e := newEnv(t)
		s := e.open()
		envs.Store(s, e)
		return s
	}, opts)
}

// docSize returns the size of the item's BSON document as the server holds it ($bsonSize of it, read as
// the raw document the server returns).
func docSize(t *testing.T, e env, tenant, key string) int {
	t.Helper()
	raw, err := e.collection(mongostore.ItemsCollection).FindOne(t.Context(), bson.D{{Key: "tenant", Value: tenant}, {Key: "key", Value: key}}).Raw()
	if err != nil {
		t.Fatalf("the document of %s/%s: %v", tenant, key, err)
	}
	return len(raw)
}
