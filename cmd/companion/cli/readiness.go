package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

func init() {
	commands = append(commands,
		command{"healthcheck", "ask the running service whether it is ready (GET /readyz); exit 0 or 1", (*Main).healthcheck})
}

const healthcheckSynopsis = `Asks the service listening on --addr whether it is ready (GET /readyz) and exits 0 when it
answers 200, 1 otherwise: the image's HEALTHCHECK, and a probe for anything that can run a command
but has no curl (a scratch image has none). --addr is the address serve listens on, read from the
same COMPANION_ADDR; an address on every interface (0.0.0.0:8080, [::]:8080, :8080) is asked on
loopback. Ready means the ledger can durably write now: 503 while it cannot (a full disk, a store
that refuses writes), until a write succeeds again.`

// healthcheck asks /readyz of the service and fails unless it is ready.
func (m *Main) healthcheck(ctx context.Context, args []string) error {
	fs := m.newFlags("healthcheck", healthcheckSynopsis)
	addr := fs.String("addr", m.env("COMPANION_ADDR", "127.0.0.1:8080"), "`host:port` the service listens on (env COMPANION_ADDR)")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if done, err := m.parse(fs, args); done {
		return err
	}
	target, err := dialable(*addr)
	if err != nil {
		return usageErrorf("--addr (COMPANION_ADDR) %q: %v; give host:port, e.g. --addr %s", *addr, err, addrSuggestion(*addr))
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	url := "http://" + target + "/readyz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("not ready: %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("not ready: %s answered %s%s", url, resp.Status, errorWords(body))
	}
	fmt.Fprintf(m.Stdout, "ready: %s\n", url)
	return nil
}

// dialable is the address a client on this host reaches a listener on addr at: an address on every
// interface is reached on loopback.
func dialable(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port), nil
}

// errorWords is the code and message of an error answer (": store_unavailable: …"), or "" when the
// body is not one.
func errorWords(body []byte) string {
	var e struct {
		Error apiError `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Code == "" {
		return ""
	}
	return ": " + strings.TrimSpace(e.Error.Code+": "+e.Error.Message)
}
