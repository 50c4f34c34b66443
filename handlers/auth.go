package handlers

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/replaysafe/companion/items"
)

// Role is what a token may do.
type Role string

const (
	// RoleWorkflow may ask before writes, report after them, reconcile, and read items and batches.
	RoleWorkflow Role = "workflow"
	// RoleOperator may do all a workflow may, and list, resolve, and read stats and metrics.
	RoleOperator Role = "operator"
)

// Token is one configured bearer token: name:tenant:role:secret.
type Token struct {
	// Name says who holds the token; it is recorded as the resolver of an operator's resolution.
	Name   string
	Tenant string
	Role   Role
	Secret string
}

// Principal is the authenticated caller of a request.
type Principal struct {
	Name   string
	Tenant string
	Role   Role
}

// OpenPrincipal is every caller of a service running open, without tokens.
var OpenPrincipal = Principal{Name: "local", Tenant: "default", Role: RoleOperator}

// ParseTokens reads tokens written as "name:tenant:role:secret", separated by commas or newlines. The
// secret is everything after the third colon, so it may hold colons itself. Blank entries are skipped.
func ParseTokens(s string) ([]Token, error) {
	var out []Token
	for i, entry := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		f := strings.SplitN(entry, ":", 4)
		if len(f) != 4 {
			return nil, fmt.Errorf("token %d: want name:tenant:role:secret, got %d part(s)", i+1, len(f))
		}
		out = append(out, Token{Name: f[0], Tenant: f[1], Role: Role(f[2]), Secret: f[3]})
	}
	return out, nil
}

// MinSecretLength is the shortest secret a token may have: 16 characters, which a person can still
// copy, and random ones (openssl rand -hex 16 gives 32) are far out of reach of guessing.
const MinSecretLength = 16

// CheckTokens returns the first problem of a token list: a missing name, a secret shorter than
// MinSecretLength or holding whitespace or ';' (tokens are separated by commas or newlines: a ';' or a
// space means two tokens were run together), a tenant that is not made of key characters, an unknown
// role, or a name or secret used twice (a shared secret would make the caller's identity ambiguous).
// Messages name tokens, never secrets.
func CheckTokens(tokens []Token) error {
	names := map[string]bool{}
	secrets := map[string]string{}
	for i, t := range tokens {
		label := fmt.Sprintf("token %d (%s)", i+1, t.Name)
		switch {
		case t.Name == "":
			return fmt.Errorf("token %d: name is empty", i+1)
		case !items.ValidKeyPart(t.Tenant):
			return fmt.Errorf("%s: tenant %q %s", label, t.Tenant, items.PartRule)
		case t.Role != RoleWorkflow && t.Role != RoleOperator:
			return fmt.Errorf("%s: role %q is not one of workflow, operator", label, t.Role)
		case t.Secret == "":
			return fmt.Errorf("%s: secret is empty", label)
		case strings.ContainsRune(t.Secret, ';'):
			return fmt.Errorf("%s: the secret holds a ';': separate tokens with commas or newlines, not semicolons", label)
		case strings.IndexFunc(t.Secret, unicode.IsSpace) >= 0:
			return fmt.Errorf("%s: the secret holds whitespace: separate tokens with commas or newlines, and use secrets without spaces", label)
		case utf8.RuneCountInString(t.Secret) < MinSecretLength:
			return fmt.Errorf("%s: the secret is shorter than %d characters (openssl rand -hex 16 makes a good one)", label, MinSecretLength)
		case names[t.Name]:
			return fmt.Errorf("%s: the name is used by another token", label)
		}
		if other, ok := secrets[t.Secret]; ok {
			return fmt.Errorf("%s: the secret is the same as token %s's", label, other)
		}
		names[t.Name] = true
		secrets[t.Secret] = t.Name
	}
	return nil
}

// authenticator finds the principal behind a bearer secret.
type authenticator struct {
	open   bool
	tokens []storedToken
}

type storedToken struct {
	principal Principal
	digest    [sha256.Size]byte
}

func newAuthenticator(tokens []Token, open bool) authenticator {
	a := authenticator{open: open && len(tokens) == 0}
	for _, t := range tokens {
		a.tokens = append(a.tokens, storedToken{
			principal: Principal{Name: t.Name, Tenant: t.Tenant, Role: t.Role},
			digest:    sha256.Sum256([]byte(t.Secret)),
		})
	}
	return a
}

// tenants returns the tenants of the tokens, sorted, each once; in open mode, the open tenant.
func (a authenticator) tenants() []string {
	if a.open {
		return []string{OpenPrincipal.Tenant}
	}
	var out []string
	for _, t := range a.tokens {
		if !slices.Contains(out, t.principal.Tenant) {
			out = append(out, t.principal.Tenant)
		}
	}
	slices.Sort(out)
	return out
}

// lookup returns the principal of a secret. It compares digests of equal length in constant time and
// looks at every token, so neither the length nor the position of a match shows in the timing.
func (a authenticator) lookup(secret string) (Principal, bool) {
	d := sha256.Sum256([]byte(secret))
	var found Principal
	ok := 0
	for _, t := range a.tokens {
		if subtle.ConstantTimeCompare(d[:], t.digest[:]) == 1 {
			found, ok = t.principal, 1
		}
	}
	return found, ok == 1
}

type principalKey struct{}

// PrincipalFrom returns the authenticated caller of a request, as an extra Route's handler sees it.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// principal returns the caller of a request that passed authorize.
func principal(c *gin.Context) Principal {
	p, _ := principalOf(c)
	return p
}

// principalOf returns the caller of a request, and false for a public route's.
func principalOf(c *gin.Context) (Principal, bool) {
	l := lineOf(c)
	return l.who, l.authenticated
}

// authorize checks the first two rows of the order of checks: authentication (401), then the role (403).
// The caller is kept in the request's line, where the built-in handlers find it (principal); with
// inContext, for an extra Route's plain http.Handler, it is also put in the request's context
// (PrincipalFrom), which costs every request a copy of its http.Request.
func (s *server) authorize(access Access, inContext bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		if access == Public {
			c.Next()
			return
		}
		p, err := s.authenticate(c)
		if err != nil {
			s.writeError(c, err)
			return
		}
		line := lineOf(c)
		line.tenant = p.Tenant
		if access == Operator && p.Role != RoleOperator {
			s.writeError(c, &items.Error{Code: CodeForbidden, Message: "this endpoint needs an operator token; " + p.Name + " is a " + string(p.Role) + " token"})
			return
		}
		line.who, line.authenticated = p, true
		if inContext {
			c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), principalKey{}, p))
		}
		c.Next()
	}
}

func (s *server) authenticate(c *gin.Context) (Principal, error) {
	if s.auth.open {
		return OpenPrincipal, nil
	}
	h := c.GetHeader("Authorization")
	scheme, secret, found := strings.Cut(h, " ")
	if h == "" {
		return Principal{}, &items.Error{Code: CodeUnauthorized, Message: "missing Authorization: Bearer <token>"}
	}
	if !found || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		return Principal{}, &items.Error{Code: CodeUnauthorized, Message: "the Authorization header must be Bearer <token>"}
	}
	p, ok := s.auth.lookup(strings.TrimSpace(secret))
	if !ok {
		if strings.Count(secret, ":") >= 3 {
			// Most likely the whole configured line, name:tenant:role:secret, pasted as the bearer.
			return Principal{}, &items.Error{Code: CodeUnauthorized,
				Message: "unknown token; send only the secret, the part after the third colon of name:tenant:role:secret"}
		}
		return Principal{}, &items.Error{Code: CodeUnauthorized,
			Message: "unknown token: no token of this service has this secret (check that it was pasted whole, and against the service's tokens: COMPANION_TOKENS, COMPANION_TOKENS_FILE or the config file's tokens:)"}
	}
	return p, nil
}
