package mongostore

import (
	"net/url"
	"strings"
)

// redactedValue replaces a credential in a redacted URI.
const redactedValue = "xxxxx"

// Redacted returns uri fit for a log line: the user name and password are replaced, and so are the
// values of query options that can carry a secret (authMechanismProperties, tlsCertificateKeyFilePassword
// and the like). Hosts, database and the other options stay, so the line still says where the ledger is.
// A URI it cannot take apart is replaced as a whole.
func Redacted(uri string) string {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok || scheme == "" {
		return "(unparsable MongoDB URI)"
	}
	// The authority runs to the first '/' or '?'; MongoDB URIs may list several hosts in it, so it is
	// taken apart by hand rather than with net/url, which expects one host.
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		authority = redactedValue + "@" + authority[at+1:]
	}
	path, query, hasQuery := strings.Cut(tail, "?")
	if !hasQuery {
		return scheme + "://" + authority + path
	}
	parts := strings.Split(query, "&")
	for i, p := range parts {
		name, _, _ := strings.Cut(p, "=")
		if secretOption(name) {
			parts[i] = name + "=" + redactedValue
		}
	}
	return scheme + "://" + authority + path + "?" + strings.Join(parts, "&")
}

// secretOption reports whether a URI option's value may hold a credential.
func secretOption(name string) bool {
	n, err := url.QueryUnescape(name)
	if err != nil {
		return true
	}
	n = strings.ToLower(n)
	return n == "authmechanismproperties" || strings.Contains(n, "password") ||
		strings.Contains(n, "secret") || strings.Contains(n, "token")
}
