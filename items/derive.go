package items

import (
	"crypto/hmac"
	"crypto/sha256"
)

// DeriveKey returns a 32-byte key for purpose, derived from the ledger secret: HMAC-SHA256(secret,
// "\x00companion derived key\x00" + purpose). Every process on the same store derives the same key, so a
// value one replica seals another opens (the console's session cookies). The input starts with a zero
// byte, which neither a fingerprint's input (canonical JSON) nor an idempotency key's (a tenant, never
// empty) does, so a derived key is no fingerprint or idempotency key, and keys of two purposes differ.
func (l *Ledger) DeriveKey(purpose string) []byte {
	m := hmac.New(sha256.New, l.secret)
	m.Write([]byte("\x00companion derived key\x00" + purpose))
	return m.Sum(nil)
}
