package cli

// The service speaks TLS to Slack and to the destinations' lookups, and a container image built FROM
// scratch holds no CA certificates and no zoneinfo database. Both are linked into the program: the
// system's roots are used wherever it has them (SSL_CERT_FILE, SSL_CERT_DIR, /etc/ssl/certs), the
// embedded Mozilla set only where it has none; time zones load from the system first as well.
import (
	_ "time/tzdata"

	_ "golang.org/x/crypto/x509roots/fallback"
)
