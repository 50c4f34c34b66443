// Package sandbox is the sandbox receiver: a fake destination for tests and
// demos of replay-safe writes.
//
// It creates business records (POST /records), answers lookups by business
// reference (GET /records?reference=R), counts the effects it created
// (GET /effects), and can be told to misbehave at a named boundary: refuse a
// connection before reading a byte, reject before commit, or commit and then
// drop, fail or delay the answer. Those are exactly the situations in which a
// caller cannot tell whether its write happened, so tests of the ledger and of
// the workflow templates run against this receiver and then compare what the
// ledger believes with what /effects counts.
//
// The HTTP contract is fixed (other parts of the project write clients
// against it) and is described in docs/sandbox-receiver.md. The command
// `companion receiver` is [Command].
package sandbox
