package items

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"strconv"
	"strings"
)

// MaxKeyLength is the longest key the ledger accepts.
const MaxKeyLength = 200

// KeyRule is the message given for a malformed key.
const KeyRule = "must be 1-200 characters of A-Z a-z 0-9 . _ : @ + = ~ -, not only dots"

// PartRule is the message given for a malformed key part.
const PartRule = "must be 1-200 characters of A-Z a-z 0-9 . _ @ + = ~ - (no colon)"

func keyChar(c byte, colon bool) bool {
	switch {
	case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		return true
	case c == '.', c == '_', c == '@', c == '+', c == '=', c == '~', c == '-':
		return true
	case c == ':':
		return colon
	}
	return false
}

func validKeyText(s string, colon bool) bool {
	if len(s) == 0 || len(s) > MaxKeyLength {
		return false
	}
	onlyDots := true
	for i := 0; i < len(s); i++ {
		if !keyChar(s[i], colon) {
			return false
		}
		if s[i] != '.' {
			onlyDots = false
		}
	}
	return !onlyDots
}

// ValidKey reports whether key follows the key rules of the contract.
func ValidKey(key string) bool { return validKeyText(key, true) }

// ValidKeyPart reports whether s may be one of the workflow, object or action parts of a derived key.
func ValidKeyPart(s string) bool { return validKeyText(s, false) }

// KeyParts are the four parts a key can be derived from: workflow:object:action:sequence.
type KeyParts struct {
	Workflow string
	Object   string
	Action   string
	// Sequence is a non-negative integer or a string of key characters without a colon.
	Sequence string
}

// ParseSequence turns the JSON value of a sequence (a non-negative integer or a string) into its key text.
// It returns false for anything else.
func ParseSequence(raw string, isString bool) (string, bool) {
	if isString {
		return raw, ValidKeyPart(raw)
	}
	n, err := strconv.ParseUint(raw, 10, 63)
	if err != nil {
		return "", false
	}
	return strconv.FormatUint(n, 10), true
}

// Key returns the derived key, workflow:object:action:sequence.
func (p KeyParts) Key() string {
	return strings.Join([]string{p.Workflow, p.Object, p.Action, p.Sequence}, ":")
}

// SplitKey returns the parts of a key that has the derived four-part shape, or false.
func SplitKey(key string) (KeyParts, bool) {
	f := strings.Split(key, ":")
	if len(f) != 4 {
		return KeyParts{}, false
	}
	for _, s := range f {
		if !ValidKeyPart(s) {
			return KeyParts{}, false
		}
	}
	return KeyParts{Workflow: f[0], Object: f[1], Action: f[2], Sequence: f[3]}, true
}

// IdempotencyKey derives the key a workflow forwards to the destination: "ik_" and the first 32 hex
// characters of HMAC-SHA256(secret, tenant NUL key). It is stable across restarts and replicas because the
// secret lives in the store, and it reveals nothing about the key.
func IdempotencyKey(secret []byte, tenant, key string) string {
	return idempotencyKey(hmac.New(sha256.New, secret), tenant, key)
}

// idempotencyKey is IdempotencyKey with m, an HMAC-SHA256 under the ledger secret, which it resets.
func idempotencyKey(m hash.Hash, tenant, key string) string {
	m.Reset()
	io.WriteString(m, tenant)
	m.Write([]byte{0})
	io.WriteString(m, key)
	var sum [sha256.Size]byte
	var out [3 + 32]byte
	copy(out[:], "ik_")
	hex.Encode(out[3:], m.Sum(sum[:0])[:16])
	return string(out[:])
}
