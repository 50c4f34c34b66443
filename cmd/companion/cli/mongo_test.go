package cli_test

import (
	"testing"

	"github.com/replaysafe/companion/items/mongostore"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
)

// MONGODB_URI selects the MongoDB store: the same API answers, the ledger lives in MongoDB (a restart on
// another data dir still knows the claim), and the start line names MongoDB (checkSharedStore).
func TestServeOnMongoDB(t *testing.T) {
	srv := mongotest.Start(t)
	checkSharedStore(t, map[string]string{"MONGODB_URI": srv.URI(), "MONGODB_DATABASE": "companion_cli_test"},
		"mongodb", "mongodb "+mongostore.Redacted(srv.URI())+" database companion_cli_test")
}
