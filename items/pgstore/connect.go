package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/replaysafe/companion/items"
)

// DefaultStartWait bounds how long Open waits for the server to accept a connection when the connection
// string does not say (connect_timeout): a database started at the same moment as companion (one compose
// file) has time to come up; a URL that points nowhere still fails the start in seconds.
const DefaultStartWait = 10 * time.Second

// DefaultMaxConns is the size of the pool Open makes when the connection string does not say
// (pool_max_conns): the committers' transactions and the reads of one replica. Three replicas take 30
// of the server's connections (max_connections is 100 by default, n8n's pool 10).
const DefaultMaxConns = 10

// Open connects to the PostgreSQL that connString names (a postgres:// URL or a key/value string, which
// the libpq environment variables PGHOST, PGUSER, PGPASSWORD, … complete, as pgx reads them), waits up to
// its connect_timeout (else DefaultStartWait) for the server to accept a connection, and returns the
// store in schema (New), which Close closes with its pool. Returns a *ConnectError (which is
// items.ErrUnavailable) when no server accepted a connection; no error carries the password.
func Open(ctx context.Context, connString, schema string, opts ...Option) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, parseError(err)
	}
	wait := DefaultStartWait
	if cfg.ConnConfig.ConnectTimeout > 0 {
		wait = cfg.ConnConfig.ConnectTimeout
	}
	if !strings.Contains(connString, "pool_max_conns") {
		cfg.MaxConns = DefaultMaxConns
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "companion"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, parseError(err)
	}
	if err := awaitServer(ctx, pool, wait); err != nil {
		pool.Close()
		return nil, connectError(cfg, wait, err)
	}
	s, err := New(ctx, pool, schema, opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownsPool = true
	return s, nil
}

// awaitServer pings the server until it answers or wait has passed. A server that refuses the login, or
// has no such database, is not asked again: waiting does not change its answer. When wait ends during a
// ping, the error is the last one a whole ping met (connection refused), not the cut-off's.
func awaitServer(ctx context.Context, pool *pgxpool.Pool, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var last error
	for {
		began := time.Now()
		err := pool.Ping(ctx)
		if err == nil || final(err) {
			return err
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		if ctx.Err() != nil {
			return last
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(max(0, 200*time.Millisecond-time.Since(began))):
		}
	}
}

// final reports whether a failed connection's answer will not change by waiting: the server refused the
// login or the database, rather than not answering or still starting.
func final(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return pe.Code != "57P03" && !strings.HasPrefix(pe.Code, "53") // cannot_connect_now, too_many_connections
}

// ConnectError is Open's error when the server did not accept a connection: where it was tried, and what
// it said. It wraps items.ErrUnavailable. Its message is one line, without the password.
type ConnectError struct {
	// Addr is the host and port tried (several, comma-separated, for a connection string naming several).
	Addr string
	// User and Database are the ones the connection asked for.
	User, Database string
	// Wait is how long Open waited.
	Wait time.Duration
	// Said is what the server (or the network) said, in a few words.
	Said string
	err  error
}

func (e *ConnectError) Error() string {
	switch {
	case strings.HasPrefix(e.Said, "password authentication failed"), strings.HasPrefix(e.Said, "role "):
		return fmt.Sprintf("PostgreSQL at %s refused the login of user %q (%s); check the user and password "+
			"(POSTGRES_URL, or PGUSER and PGPASSWORD)", e.Addr, e.User, e.Said)
	case strings.HasPrefix(e.Said, "no pg_hba.conf entry"):
		return fmt.Sprintf("PostgreSQL at %s refused the connection (%s); allow this machine, user and database in the server's "+
			"pg_hba.conf", e.Addr, e.Said)
	case strings.HasPrefix(e.Said, "database "):
		return fmt.Sprintf("PostgreSQL at %s has no database %q (%s); create it (createdb -O %s %s) or name another in POSTGRES_URL",
			e.Addr, e.Database, e.Said, e.User, e.Database)
	case serverAnswered(e.err):
		return fmt.Sprintf("PostgreSQL at %s refused the connection: %s", e.Addr, e.Said)
	}
	return fmt.Sprintf("no PostgreSQL answered at %s within %s (%s); check that PostgreSQL runs there and that this machine "+
		"reaches it (host, port, firewall, the server's listen_addresses and pg_hba.conf, sslmode); a server that needs longer "+
		"to start can be given connect_timeout in POSTGRES_URL", e.Addr, e.Wait, e.Said)
}

// Unwrap returns items.ErrUnavailable and the cause.
func (e *ConnectError) Unwrap() []error { return []error{items.ErrUnavailable, e.err} }

func serverAnswered(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}

// connectError says why the server in cfg did not accept a connection within wait.
func connectError(cfg *pgxpool.Config, wait time.Duration, err error) *ConnectError {
	c := cfg.ConnConfig
	return &ConnectError{Addr: addresses(&c.Config), User: c.User, Database: c.Database, Wait: wait, Said: said(err, c.Password), err: err}
}

// addresses are the hosts and ports of a connection's configuration, as host:port.
func addresses(c *pgconn.Config) string {
	addrs := []string{hostPort(c.Host, c.Port)}
	for _, f := range c.Fallbacks {
		if a := hostPort(f.Host, f.Port); a != addrs[len(addrs)-1] && !strings.Contains(strings.Join(addrs, ","), a) {
			addrs = append(addrs, a)
		}
	}
	return strings.Join(addrs, ",")
}

func hostPort(host string, port uint16) string {
	if strings.HasPrefix(host, "/") { // a Unix socket's directory
		return host + "/.s.PGSQL." + strconv.Itoa(int(port))
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// said words what the server or the network said about a connection, in a few words, without password.
func said(err error, password string) string {
	var pe *pgconn.PgError
	var dns *net.DNSError
	var netErr net.Error
	var msg string
	switch {
	case errors.As(err, &pe):
		msg = pe.Message
	case errors.As(err, &dns) && dns.IsNotFound:
		msg = "no such host"
	case errors.As(err, &dns):
		msg = "host name not resolved (" + dns.Err + ")"
	case errors.Is(err, syscall.ECONNREFUSED):
		msg = "connection refused"
	case errors.Is(err, syscall.ENOENT):
		msg = "no server socket there"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		msg = "no answer"
	default:
		msg = err.Error()
		// pgconn's own words name the user and database and the address, which the message says already.
		if _, rest, ok := strings.Cut(msg, "`: "); ok {
			msg = rest
		}
		msg = strings.ReplaceAll(msg, "\n", " ")
	}
	if password != "" {
		msg = strings.ReplaceAll(msg, password, "xxxxx")
	}
	return msg
}

// parseError says why connString cannot be used, without any part of it (a string that does not parse
// gives no password to take out).
func parseError(err error) error {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return fmt.Errorf("postgres: %w", err)
	}
	msg := pe.Error()
	if _, rest, ok := strings.Cut(msg, "`: "); ok {
		msg = rest
	}
	if inner := errors.Unwrap(pe); inner != nil {
		msg = strings.TrimSuffix(msg, " ("+inner.Error()+")")
	}
	var ue *url.Error
	if errors.As(err, &ue) || strings.HasPrefix(msg, "failed to parse as URL") {
		msg = "it is not a URL this service can read: percent-encode the user name and password in it (a % is written %25, " +
			"and @ : / ? # as %40 %3A %2F %3F %23), or give a key/value string (host=… port=… user=… dbname=…)"
	}
	return badURL{msg: msg, err: err}
}

// badURL is parseError's error: its own words, unwrapping to pgx's error (which may hold the secret).
type badURL struct {
	msg string
	err error
}

func (e badURL) Error() string { return "the PostgreSQL connection string cannot be used: " + e.msg }
func (e badURL) Unwrap() error { return e.err }

// Describe returns where connString (completed by the PG* environment variables) points, for a log line:
// postgres://user@host:port/database, never the password; a string that cannot be parsed is described as
// such.
func Describe(connString string) string {
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return "(a PostgreSQL connection string that cannot be parsed)"
	}
	return "postgres://" + cfg.User + "@" + addresses(cfg) + "/" + cfg.Database
}
