package main

// The Companion API credential's test as n8n runs it: the editor's Test button sends the credential to
// POST /rest/credentials/test, and n8n runs the credential type's declarative test request (n8n-node's
// CompanionApi.test) with its rules. n8n's REST API needs a user: the scenario sets up the instance's owner
// first (POST /rest/owner/setup, allowed once, before any owner exists), as the first visit to the editor does.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"time"
)

// n8nREST is a signed-in session of n8n's REST API.
type n8nREST struct {
	base   string
	client *http.Client
}

// browserID is the header n8n ties its session cookie to.
const browserID = "companion-e2e-browser"

func (r *n8nREST) post(path string, body, out any) (int, error) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, r.base+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("browser-id", browserID)
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && json.Unmarshal(raw, out) != nil {
		return resp.StatusCode, fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, raw)
	}
	return resp.StatusCode, nil
}

// signIn sets up n8n's owner and keeps the session cookie.
func (e *env) signIn() (*n8nREST, error) {
	jar, _ := cookiejar.New(nil)
	r := &n8nREST{base: e.n8n, client: &http.Client{Jar: jar, Timeout: 60 * time.Second}}
	code, err := r.post("/rest/owner/setup", map[string]any{
		"email": "owner@example.com", "firstName": "E2e", "lastName": "Owner", "password": "E2e-owner-password-1",
	}, nil)
	if err != nil || code != 200 {
		return nil, fmt.Errorf("set up n8n's owner: %d %v", code, err)
	}
	return r, nil
}

// scenarioNodeCredentialTest: n8n tests the Companion API credential with the node's declarative test. The
// workflow token against companion is accepted ("Connection successful!", the token being a workflow one:
// the list by execution is open to it); a wrong token gets the test's own words for a 401; a Base URL where
// no companion answers /v1/items (the sandbox receiver) its words for a 404; a port nobody listens on is
// refused.
func scenarioNodeCredentialTest(ctx context.Context, e *env) error {
	r, err := e.signIn()
	if err != nil {
		return err
	}
	test := func(baseURL, tok string) (string, string, error) {
		var out struct {
			Data struct {
				Status  string `json:"status"`
				Message string `json:"message"`
			} `json:"data"`
		}
		code, err := r.post("/rest/credentials/test", map[string]any{"credentials": map[string]any{
			"id": "", "name": "companion", "type": "companionApi", "data": map[string]any{"baseUrl": baseURL, "token": tok},
		}}, &out)
		if err == nil && code != 200 {
			err = fmt.Errorf("POST /rest/credentials/test answered %d", code)
		}
		return out.Data.Status, out.Data.Message, err
	}
	dead := fmt.Sprintf("http://127.0.0.1:%d", mustFreePort())
	var errs []error
	for _, c := range []struct {
		name, baseURL, token, status, message string
	}{
		{"the workflow token", e.companion + "/", token, "OK", "Connection successful!"},
		{"a wrong token", e.companion, "not-a-token-of-this-companion", "Error", "companion refused the token (401 unauthorized)"},
		{"the receiver's URL", e.receiver, token, "Error", "no companion API at this Base URL (404)"},
		{"nothing listening", dead, token, "Error", "ECONNREFUSED"},
	} {
		status, message, err := test(c.baseURL, c.token)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
		case status != c.status || !strings.Contains(message, c.message):
			errs = append(errs, fmt.Errorf("%s: n8n's test says %s %q, want %s with %q", c.name, status, message, c.status, c.message))
		}
	}
	return errors.Join(errs...)
}

func mustFreePort() int {
	p, err := freePort()
	if err != nil {
		panic(err)
	}
	return p
}
