package cli_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/cmd/companion/cli"
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

// TestServeRefusesAnUnreachableMongoDB: serve and sweep --once on a MONGODB_URI where nothing listens stop
// within the URI's serverSelectionTimeoutMS with one line naming the host tried, what it said and what to
// check, exit status 1 as other start failures, and never the URI's password or the driver's topology dump.
func TestServeRefusesAnUnreachableMongoDB(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, args := range [][]string{{"serve"}, {"sweep", "--once"}} {
		p := newProgram(map[string]string{
			"COMPANION_ADDR": "127.0.0.1:0",
			"MONGODB_URI":    "mongodb://ledger:hunter2@" + addr + "/?serverSelectionTimeoutMS=400&authSource=admin",
		})
		began := time.Now()
		err := p.Run(t.Context(), args)
		took := time.Since(began)
		p.Close()
		if err == nil {
			t.Fatalf("%v started without its MongoDB", args)
		}
		msg := err.Error()
		for _, want := range []string{"cannot open the ledger on MongoDB mongodb://xxxxx@" + addr, "within 400ms",
			addr + ": connection refused", "check that MongoDB runs"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%v: the error lacks %q: %s", args, want, msg)
			}
		}
		for _, not := range []string{"hunter2", "topology", "\n"} {
			if strings.Contains(msg, not) {
				t.Errorf("%v: the error shows %q: %s", args, not, msg)
			}
		}
		if code := cli.ExitCode(err); code != 1 {
			t.Errorf("%v: exit status %d, want 1 as other start failures", args, code)
		}
		if took > 4*time.Second {
			t.Errorf("%v took %v to give up, want about the URI's 400ms", args, took)
		}
	}
}
