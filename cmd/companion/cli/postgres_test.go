package cli_test

import (
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/cmd/companion/cli"
	"github.com/replaysafe/companion/items/pgstore"
	"github.com/replaysafe/companion/items/pgstore/pgtest"
)

// POSTGRES_URL selects the PostgreSQL store: the same API answers, the ledger lives in the schema
// POSTGRES_SCHEMA names (a restart on another data dir still knows the claim), the start line names the
// server without the password, and sweep --once and the bench's floor work on it.
func TestServeOnPostgreSQL(t *testing.T) {
	url, schema := pgtest.Schema(t)
	env := map[string]string{"POSTGRES_URL": url, "POSTGRES_SCHEMA": schema}
	again := checkSharedStore(t, env, "postgres", "store postgres "+pgstore.Describe(url)+" schema "+schema)
	if strings.Contains(again.err.String(), "companion_test:companion_test") {
		t.Errorf("the start line shows the password:\n%s", again.err)
	}

	out, err := run(t, env, "sweep", "--once")
	if err != nil || !strings.Contains(out, "swept postgres "+pgstore.Describe(url)+" schema "+schema) {
		t.Errorf("sweep --once on PostgreSQL: %v\n%s", err, out)
	}

	benchEnv := map[string]string{"COMPANION_URL": "http://" + again.Addr(), "POSTGRES_URL": url, "POSTGRES_SCHEMA": schema}
	out, err = run(t, benchEnv, "bench", "--items", "40", "--callers", "4", "--prefix", "bench-pg", "--floor", "postgres", "--floor-items", "20")
	if err != nil {
		t.Fatalf("bench --floor postgres: %v\n%s", err, out)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^\s+single, 4 callers\s+40\s+[0-9]+\s+0\s*$`),
		regexp.MustCompile(`(?m)^\s+floor \(PostgreSQL, 2 commits/item, 4 callers\)\s+40\s+20\s+[0-9]+`),
		regexp.MustCompile(`× the floor \([0-9]+ items/s; [0-9]+ before the run, [0-9]+ after it\)`),
	} {
		if !want.MatchString(out) {
			t.Errorf("bench --floor postgres: no %s in\n%s", want, out)
		}
	}
}

// TestServeRefusesAnUnreachablePostgreSQL: serve and sweep --once on a POSTGRES_URL where nothing listens
// stop within its connect_timeout with one line naming the host and port, what it said and what to check,
// exit status 1 as other start failures, and never the password.
func TestServeRefusesAnUnreachablePostgreSQL(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, args := range [][]string{{"serve"}, {"sweep", "--once"}} {
		p := newProgram(map[string]string{
			"COMPANION_ADDR": "127.0.0.1:0",
			"POSTGRES_URL":   "postgres://ledger:hunter2@" + addr + "/companion?connect_timeout=1",
		})
		began := time.Now()
		err := p.Run(t.Context(), args)
		took := time.Since(began)
		p.Close()
		if err == nil {
			t.Fatalf("%v started without its PostgreSQL", args)
		}
		msg := err.Error()
		for _, want := range []string{"cannot open the ledger on PostgreSQL postgres://ledger@" + addr + "/companion (schema companion)",
			"no PostgreSQL answered at " + addr + " within 1s (connection refused)", "check that PostgreSQL runs there"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%v: the error lacks %q: %s", args, want, msg)
			}
		}
		for _, not := range []string{"hunter2", "\n"} {
			if strings.Contains(msg, not) {
				t.Errorf("%v: the error shows %q: %s", args, not, msg)
			}
		}
		if code := cli.ExitCode(err); code != 1 {
			t.Errorf("%v: exit status %d, want 1 as other start failures", args, code)
		}
		if took > 5*time.Second {
			t.Errorf("%v took %v to give up, want about the URL's connect_timeout of 1s", args, took)
		}
	}
}

// TestServeRefusesTwoStores: MONGODB_URI and POSTGRES_URL both set is a mistake the start names, before it
// opens either; so is --floor postgres without POSTGRES_URL.
func TestServeRefusesTwoStores(t *testing.T) {
	env := map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "MONGODB_URI": "mongodb://127.0.0.1:1/", "POSTGRES_URL_FILE": "/run/secrets/pg"}
	for _, args := range [][]string{{"serve"}, {"sweep", "--once"}} {
		_, err := run(t, env, args...)
		if err == nil || !strings.Contains(err.Error(), "both MONGODB_URI and POSTGRES_URL are set: the ledger lives in one store") {
			t.Errorf("%v with both stores: %v", args, err)
		}
	}
	_, err := run(t, map[string]string{"COMPANION_URL": "http://127.0.0.1:1"}, "bench", "--items", "0", "--floor", "postgres")
	if err == nil || !strings.Contains(err.Error(), "--floor postgres measures the PostgreSQL of POSTGRES_URL") {
		t.Errorf("--floor postgres without POSTGRES_URL: %v", err)
	}
}
