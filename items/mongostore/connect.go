package mongostore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/description"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/replaysafe/companion/items"
)

// DefaultStartWait bounds how long Open waits for the deployment's primary to answer, when the URI does
// not say (serverSelectionTimeoutMS). It is longer than an operation's timeout (DefaultTimeout): a
// deployment started at the same moment as companion, or electing a primary, has time to answer; a URI
// that points nowhere still fails the start in seconds, not minutes.
const DefaultStartWait = 10 * time.Second

// ConnectError is Open's error when no server of the deployment answered as a primary within the start's
// wait: the hosts it tried, and what each last said. It wraps items.ErrUnavailable. Its message carries
// neither the URI's user name and password nor the driver's topology dump.
type ConnectError struct {
	// Wait is how long Open waited.
	Wait time.Duration
	// Hosts are the servers tried, as host:port, each with what it last said ("connection refused",
	// "no such host", "no answer", "answered as a secondary").
	Hosts []HostState
	// ReplicaSet is the URI's replicaSet, if it names one.
	ReplicaSet string
	err        error
}

// HostState is one server Open tried, and what it last said.
type HostState struct {
	Addr, Said string
}

func (e *ConnectError) Error() string {
	tried := make([]string, len(e.Hosts))
	for i, h := range e.Hosts {
		tried[i] = h.Addr + ": " + h.Said
	}
	set := ""
	if e.ReplicaSet != "" {
		set = ", and that " + e.ReplicaSet + " is the replica set's name (the URI's replicaSet)"
	}
	return fmt.Sprintf("no MongoDB primary answered within %s (%s); check that MongoDB runs at the URI's hosts and that "+
		"this machine reaches them (address, port, firewall or Atlas access list, TLS)%s; a deployment that needs "+
		"longer to start can be given serverSelectionTimeoutMS in the URI", e.Wait, strings.Join(tried, "; "), set)
}

// Unwrap returns items.ErrUnavailable and the driver's error.
func (e *ConnectError) Unwrap() []error { return []error{items.ErrUnavailable, e.err} }

// startWait is how long Open waits for a primary: the URI's serverSelectionTimeoutMS, else
// DefaultStartWait. It is read before Open sets the operations' own server selection timeout.
func startWait(copts *options.ClientOptions) time.Duration {
	if copts.ServerSelectionTimeout != nil && *copts.ServerSelectionTimeout > 0 {
		return *copts.ServerSelectionTimeout
	}
	return DefaultStartWait
}

// awaitPrimary pings the primary until it answers or wait has passed. Each ping gives up after the
// client's server selection timeout (the operations' timeout), which may be shorter than wait.
func (s *Store) awaitPrimary(ctx context.Context, wait time.Duration) error {
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		began := time.Now()
		err := s.client.Ping(waitCtx, readpref.Primary())
		var sel topology.ServerSelectionError
		if err == nil || waitCtx.Err() != nil || !errors.As(err, &sel) || sel.Desc.CompatibilityErr != nil {
			return err
		}
		// Selection gives up after its timeout; one that gave up at once is not asked again at once.
		select {
		case <-waitCtx.Done():
			return err
		case <-time.After(max(0, 100*time.Millisecond-time.Since(began))):
		}
	}
}

// connectError says why Open found no primary: a ConnectError when the driver's server selection gave up,
// else the driver's error (an authentication failure, say) with the URI's password taken out.
func connectError(uri string, copts *options.ClientOptions, wait time.Duration, err error) error {
	secret := secrets(copts)
	var sel topology.ServerSelectionError
	if !errors.As(err, &sel) {
		return unavailable("connect to "+Redacted(uri), scrubbed{err, secret})
	}
	e := &ConnectError{Wait: wait, err: scrubbed{err, secret}}
	if copts.ReplicaSet != nil {
		e.ReplicaSet = *copts.ReplicaSet
	}
	for _, srv := range sel.Desc.Servers {
		e.Hosts = append(e.Hosts, HostState{Addr: srv.Addr.String(), Said: said(srv, secret)})
	}
	if len(e.Hosts) == 0 {
		for _, h := range copts.Hosts {
			e.Hosts = append(e.Hosts, HostState{Addr: h, Said: "no answer"})
		}
	}
	return e
}

// said words what a server last told the driver, in a few words.
func said(srv description.Server, secret []string) string {
	err := srv.LastError
	var dns *net.DNSError
	var errno syscall.Errno
	var netErr net.Error
	switch {
	case err == nil && srv.Kind != description.Unknown:
		return "answered as " + kindWords(srv.Kind) + ", not as the primary"
	case err == nil:
		return "no answer"
	case errors.As(err, &dns) && dns.IsNotFound:
		return "no such host"
	case errors.As(err, &dns):
		return "host name not resolved (" + dns.Err + ")"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "no answer"
	case errors.As(err, &errno):
		return errno.Error()
	}
	return scrub(err.Error(), secret)
}

func kindWords(k description.ServerKind) string {
	switch k {
	case description.ServerKindRSSecondary:
		return "a secondary"
	case description.ServerKindRSArbiter:
		return "an arbiter"
	case description.ServerKindRSGhost, description.ServerKindRSMember:
		return "a replica set member not ready"
	case description.ServerKindStandalone:
		return "a standalone server (does the URI's replicaSet name the right set?)"
	}
	return k.String()
}

// uriError says why the driver refused the URI as written (Connect's error), in its words without
// their "error parsing uri: " and without any part of the user name or password: the driver's words for
// a user name or password that is not percent-encoded quote the offending escape ("invalid URL escape
// "%et""), a piece of the secret, and a URI that does not parse gives no password to scrub.
// The caller names the URI (Redacted); the message does not repeat it.
func uriError(err error, secret []string) error {
	const encode = "percent-encode it (a % in it is written %25, and @ : / ? # [ ] as %40 %3A %2F %3F %23 %5B %5D)"
	msg := strings.TrimPrefix(scrub(err.Error(), secret), "error parsing uri: ")
	switch {
	case strings.HasPrefix(msg, "invalid password"), strings.HasPrefix(msg, "unescaped colon in password"):
		msg = "its password is not written as a URI needs: " + encode
	case strings.HasPrefix(msg, "invalid username"), strings.HasPrefix(msg, "unescaped slash in username"):
		msg = "its user name is not written as a URI needs: " + encode
	case strings.HasPrefix(msg, "lookup _mongodb._tcp."):
		msg = "the SRV record of its mongodb+srv host was not found (" + msg + "); check the cluster's host name " +
			"(Atlas: Connect → Drivers) and this machine's DNS"
	}
	return badURI{msg: "the MongoDB URI cannot be used: " + msg + "; check MONGODB_URI (mongodb://user:password@host:port,…/?replicaSet=… " +
		"or mongodb+srv://user:password@cluster/)", err: err}
}

// badURI is uriError's error: its own words, unwrapping to the driver's error (which may hold the secret).
type badURI struct {
	msg string
	err error
}

func (e badURI) Error() string { return e.msg }
func (e badURI) Unwrap() error { return e.err }

// secrets are the strings of the URI no message may carry: its password, as given and decoded.
func secrets(copts *options.ClientOptions) []string {
	if copts == nil || copts.Auth == nil || copts.Auth.Password == "" {
		return nil
	}
	p := copts.Auth.Password
	return []string{p, url.QueryEscape(p), url.PathEscape(p)}
}

func scrub(msg string, secret []string) string {
	for _, s := range secret {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, redactedValue)
		}
	}
	return msg
}

// scrubbed is an error whose message has the URI's password taken out; it still unwraps to the driver's.
type scrubbed struct {
	err    error
	secret []string
}

func (e scrubbed) Error() string { return scrub(e.err.Error(), e.secret) }
func (e scrubbed) Unwrap() error { return e.err }
