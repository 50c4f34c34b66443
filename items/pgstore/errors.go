package pgstore

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/replaysafe/companion/items"
)

// Errors. Every error of pgx or of the server that leaves the package passes interpretError, once:
//
//   - no row is items.ErrNotFound;
//   - everything else the database says, or a connection that fails, is items.ErrUnavailable, with the
//     cause for the logs: the change could not be recorded, and nothing was (a transaction is all or
//     nothing; a commit whose answer was lost is settled first, see group.go). That covers a server
//     shutting down or restarting (57P01, 57P02, 57P03), a lost or refused connection (class 08), no
//     room for another connection or a full disk (class 53), a standby or read-only server (25006), a
//     dropped schema (42P01), a timeout;
//   - but some failures are not the caller's to see, and are retried inside (retryInside) while the
//     store's timeout allows: another writer creating the same new item between the read and the write,
//     or before a write that took it as new (23505 on the items' primary key), an item changed under a
//     guarded UPDATE (lostRace: after a read the row locks make it impossible; after a decision on the
//     item cache it is how a change by another writer shows), a lock a group's transaction waited for
//     too long (55P03, Store.lockTimeout), a deadlock the server broke (40P01), a
//     serialization failure (40001, which READ COMMITTED does not give these statements, and which would
//     mean the same: decide again), a server that could not run the statement now (transientServer), and
//     a connection that failed before anything was sent on it (a pooled connection the server closed:
//     pgconn.SafeToRetry) or, in a transaction of transitions, before its COMMIT was sent. Each of them
//     wrote nothing.

// maxRaces bounds how often one transaction is decided again after losing a race or a deadlock. Every
// lost race means another writer committed, so the ledger as a whole progresses; the bound only stops
// one caller from spinning for ever.
const maxRaces = 100

// interpretError translates err into the domain's errors (see above).
func interpretError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return items.ErrNotFound
	case errors.Is(err, items.ErrUnavailable), errors.Is(err, items.ErrNotFound):
		return err
	}
	return fmt.Errorf("%w: postgres: %w", items.ErrUnavailable, err)
}

// retryInside reports whether err says that a transaction or statement wrote nothing and may simply be
// run again (see above).
func retryInside(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case lostRace, "40P01", "40001", "55P03":
			return true
		case "23505":
			return pe.TableName == "items"
		}
		return transientServer(pe.Code)
	}
	return pgconn.SafeToRetry(err)
}

// transientServer reports whether a server's error says that it could not run the statement now, rather
// than that the statement is wrong: a connection exception (class 08), no room (class 53), or a server
// shutting down, restarting or starting (57P01, 57P02, 57P03). The statement was not run.
func transientServer(code string) bool {
	return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "53") || code == "57P01" || code == "57P02" || code == "57P03"
}

// serverSaid reports whether err is an answer of the server (an error it reported), rather than a
// failure to reach it or to read its answer.
func serverSaid(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}

// isDuplicate reports whether err is an insert of an item that exists (23505 on the items table).
func isDuplicate(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && pe.TableName == "items"
}
