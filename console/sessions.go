package console

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"time"
)

// Sessions are kept in the browser, not in the process: the session cookie holds the session itself,
// sealed (encrypted and authenticated, AES-256-GCM) with a key derived from the ledger secret
// (items.Ledger.DeriveKey). Every replica on the same store derives the same key, so a session made on one
// is valid on all; a cookie changed or made without the key opens nowhere. The cookie names the token it
// was made with (by a digest of its secret, never the secret) and the session's end: on every request,
// each replica checks that the end has not passed (on the ledger's clock) and that the token still is an
// operator token of its configuration, so a session ends everywhere at its end, and every session of a
// token ends at once where the token is removed or its secret changed.
//
// Signing out removes the cookie from the browser, which then has no session on any replica. Nothing is
// kept about a session on the server, so nothing is revoked there: a copy of the cookie taken before the
// sign-out (from that browser's files; the cookie is HttpOnly, Secure behind TLS, SameSite=Strict) would
// open the console until the session's end. Removing or changing the token ends such copies too.

// sessionPurpose names the key sessions are sealed with (items.Ledger.DeriveKey).
const sessionPurpose = "console sessions v1"

// sealed is what the cookie holds, sealed.
type sealed struct {
	// Token identifies the token the session was made with (Principal.Token); empty in open mode.
	Token string `json:"t,omitempty"`
	// Who is the principal in open mode (Local); a signed-in session's comes from its token.
	Name     string `json:"n"`
	Tenant   string `json:"te"`
	Operator bool   `json:"o"`
	CSRF     string `json:"c"`
	Expires  int64  `json:"e"` // Unix seconds
}

// sessionSealer seals and opens session cookies.
type sessionSealer struct{ aead cipher.AEAD }

func newSessionSealer(key []byte) *sessionSealer {
	block, err := aes.NewCipher(key)
	if err != nil {
		panic("console: session key: " + err.Error()) // a 32-byte key never fails
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic("console: session key: " + err.Error())
	}
	return &sessionSealer{aead: aead}
}

// additional binds a sealed value to its use: a value sealed with the same key for another purpose does
// not open as a session.
var additional = []byte(sessionCookie)

// seal returns the cookie value of s: a random nonce and the sealed session, in URL-safe base64.
func (ss *sessionSealer) seal(s *session) string {
	plain, _ := json.Marshal(sealed{Token: s.who.Token, Name: s.who.Name, Tenant: s.who.Tenant, Operator: s.who.Operator,
		CSRF: s.csrf, Expires: s.expires.Unix()})
	nonce := make([]byte, ss.aead.NonceSize(), ss.aead.NonceSize()+len(plain)+ss.aead.Overhead())
	_, _ = rand.Read(nonce) // never fails (crypto/rand panics instead)
	return base64.RawURLEncoding.EncodeToString(ss.aead.Seal(nonce, nonce, plain, additional))
}

// open returns the session a cookie value holds, or false when it was not sealed with this key (changed,
// made elsewhere, or damaged).
func (ss *sessionSealer) open(value string) (*session, bool) {
	b, err := base64.RawURLEncoding.DecodeString(value)
	n := ss.aead.NonceSize()
	if err != nil || len(b) < n+ss.aead.Overhead() {
		return nil, false
	}
	plain, err := ss.aead.Open(nil, b[:n], b[n:], additional)
	if err != nil {
		return nil, false
	}
	var v sealed
	if err := json.Unmarshal(plain, &v); err != nil || v.CSRF == "" {
		return nil, false
	}
	return &session{who: Principal{Name: v.Name, Tenant: v.Tenant, Operator: v.Operator, Token: v.Token}, csrf: v.CSRF,
		expires: time.Unix(v.Expires, 0)}, true
}
