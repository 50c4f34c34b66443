package pgstore_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/pgstore"
	"github.com/replaysafe/companion/items/pgstore/pgtest"
)

// freeAddr returns a loopback address where nothing listens.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestOpenSaysWhyItCannotConnect: each way a connection fails gives one line naming the host and port and
// what went wrong, without the password, within the connection string's connect_timeout; a refused login
// or a missing database is not waited for.
func TestOpenSaysWhyItCannotConnect(t *testing.T) {
	base, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	nowhere := freeAddr(t)
	wrongPassword, noDatabase := *base, *base
	wrongPassword.User = url.UserPassword(base.User.Username(), "hunter2-wrong")
	noDatabase.Path = "/no_such_database_here"
	for _, c := range []struct {
		name, conn string
		want       []string
		within     time.Duration
	}{
		{"nothing listens", "postgres://ledger:hunter2@" + nowhere + "/companion?connect_timeout=1",
			[]string{"no PostgreSQL answered at " + nowhere + " within 1s (connection refused)", "check that PostgreSQL runs there"}, 3 * time.Second},
		{"key/value string", "host=127.0.0.1 port=" + strings.Split(nowhere, ":")[1] + " user=ledger password=hunter2 connect_timeout=1",
			[]string{"no PostgreSQL answered at " + nowhere, "(connection refused)"}, 3 * time.Second},
		{"wrong password", wrongPassword.String(), []string{"PostgreSQL at " + base.Host + " refused the login of user", "password authentication failed"},
			2 * time.Second},
		{"no such database", noDatabase.String(), []string{"PostgreSQL at " + base.Host + " has no database \"no_such_database_here\""}, 2 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			began := time.Now()
			_, err := pgstore.Open(context.Background(), c.conn, "companion", pgstore.WithLogger(quiet))
			took := time.Since(began)
			if err == nil {
				t.Fatal("opened")
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("the error lacks %q: %s", w, msg)
				}
			}
			for _, not := range []string{"hunter2", "\n"} {
				if strings.Contains(msg, not) {
					t.Errorf("the error shows %q: %s", not, msg)
				}
			}
			var ce *pgstore.ConnectError
			if !errors.As(err, &ce) || !errors.Is(err, items.ErrUnavailable) {
				t.Errorf("%T is not a ConnectError wrapping ErrUnavailable", err)
			}
			if took > c.within {
				t.Errorf("gave up after %s, want within %s", took, c.within)
			}
		})
	}
}

// TestDescribeNeverShowsThePassword: the start line's description of a connection string names the user,
// host, port and database, never the password, and a string that does not parse is not echoed.
func TestDescribeNeverShowsThePassword(t *testing.T) {
	for conn, want := range map[string]string{
		"postgres://ledger:hunter2@db.example.org:5433/n8n?sslmode=require": "postgres://ledger@db.example.org:5433/n8n",
		"host=db.example.org user=ledger password=hunter2 dbname=n8n":       "postgres://ledger@db.example.org:5432/n8n",
		"postgres://ledger:hun%zzter2@db/n8n":                               "(a PostgreSQL connection string that cannot be parsed)",
	} {
		if got := pgstore.Describe(conn); got != want {
			t.Errorf("Describe(%q) = %q, want %q", conn, got, want)
		}
	}
	_, err := pgstore.Open(context.Background(), "postgres://ledger:hun%zzter2@db/n8n", "companion")
	if err == nil || strings.Contains(err.Error(), "hun") || !strings.Contains(err.Error(), "percent-encode") {
		t.Errorf("an unparsable URL: %v", err)
	}
}
