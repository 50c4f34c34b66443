// Package roots_test checks the CA roots the program carries (cmd/companion/cli/roots.go links
// golang.org/x/crypto/x509roots/fallback): where the system has no CA file, as in the image, Go's
// system roots are that embedded set, which verifies a public root and refuses an unknown CA.
// deploy/image-test.sh runs this test inside the image's file system.
package roots_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"os/exec"
	"testing"
	"time"

	_ "golang.org/x/crypto/x509roots/fallback"
)

// caFiles are where Go looks for the system's roots on Linux (crypto/x509's certFiles and certDirectories).
var caFiles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", "/etc/ssl/cert.pem",
	"/etc/ssl/certs", "/etc/pki/tls/certs"}

func systemHasRoots() bool {
	if os.Getenv("SSL_CERT_FILE") != "" || os.Getenv("SSL_CERT_DIR") != "" {
		return true
	}
	for _, f := range caFiles {
		if _, err := os.Stat(f); err == nil {
			return true
		}
	}
	return false
}

func TestEmbeddedRoots(t *testing.T) {
	how := "no CA file on this system"
	switch {
	case os.Getenv("ROOTS_TEST_CHILD") != "":
		how = "GODEBUG=x509usefallbackroots=1"
	case systemHasRoots():
		// Go prefers this machine's own CA files: ask a process that finds none (SSL_CERT_FILE and
		// SSL_CERT_DIR name nothing) and is told to use the embedded set, as the image finds none.
		cmd := exec.Command(os.Args[0], "-test.run=^TestEmbeddedRoots$", "-test.v")
		cmd.Env = append(os.Environ(), "ROOTS_TEST_CHILD=1", "GODEBUG=x509usefallbackroots=1",
			"SSL_CERT_FILE=/nonexistent/ca.pem", "SSL_CERT_DIR=/nonexistent")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("with the embedded roots: %v\n%s", err, out)
		}
		t.Logf("%s", out)
		return
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("testdata/isrg-root-x1.pem")
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	public, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	at := public.NotBefore.Add(24 * time.Hour) // any time inside its validity
	if _, err := public.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: at}); err != nil {
		t.Fatalf("%s does not verify with the system roots: %v", public.Subject.CommonName, err)
	}
	unknown := selfSigned(t)
	var ua x509.UnknownAuthorityError
	if _, err := unknown.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: time.Now()}); !errors.As(err, &ua) {
		t.Fatalf("an unknown CA: %v, want an unknown authority", err)
	}
	t.Logf("system roots: the embedded set (%s): %s verifies, an unknown CA is refused", how, public.Subject.CommonName)
}

func selfSigned(t *testing.T) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "unknown CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
