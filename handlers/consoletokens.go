package handlers

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"

	"github.com/replaysafe/companion/console"
)

// The console's sessions name the token they were made with, so that every replica re-checks it on every
// request: a session of a token removed from the configuration, or whose secret changed, ends everywhere.

// consoleTokenID names a token by its secret's digest (the first half, in hex), never by the secret.
func consoleTokenID(digest [sha256.Size]byte) string { return hex.EncodeToString(digest[:16]) }

// consolePrincipal returns the console's principal of a token secret (console.Config.Authenticate).
func (a authenticator) consolePrincipal(secret string) (console.Principal, bool) {
	p, ok := a.lookup(secret)
	return consolePrincipalOf(p, consoleTokenID(sha256.Sum256([]byte(secret)))), ok
}

// consolePrincipalOf is p as the console knows it, with the id of its token.
func consolePrincipalOf(p Principal, id string) console.Principal {
	return console.Principal{Name: p.Name, Tenant: p.Tenant, Operator: p.Role == RoleOperator, Token: id}
}

// consoleRecheck returns the console's principal of the token id names, as configured now
// (console.Config.Recheck). It compares with every token in constant time.
func (a authenticator) consoleRecheck(id string) (console.Principal, bool) {
	var found console.Principal
	ok := false
	for _, t := range a.tokens {
		tid := consoleTokenID(t.digest)
		if subtle.ConstantTimeCompare([]byte(tid), []byte(id)) == 1 {
			found, ok = consolePrincipalOf(t.principal, tid), true
		}
	}
	return found, ok
}
