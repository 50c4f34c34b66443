package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The check must be able to fail: a ledger that lost an acknowledged proceed, a success left
// unsucceeded, or a second proceed for one attempt each make the run FAIL and say which key.
func TestCheckFindsEachBrokenPromise(t *testing.T) {
	ledger := map[string]string{
		"/v1/items/kept":      `{"state":"succeeded","attempt":1,"attempts":[{"number":1,"claim":"c_1"}]}`,
		"/v1/items/lost":      `{"state":"in_flight","attempt":1,"attempts":[{"number":1,"claim":"c_other"}]}`,
		"/v1/items/unsettled": `{"state":"unknown","attempt":1,"attempts":[{"number":1,"claim":"c_3"}]}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := ledger[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(body))
	}))
	defer srv.Close()

	var out bytes.Buffer
	r, err := newRunner(options{replicas: 2, workDir: t.TempDir()}, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, rep := range r.reps {
		rep.addr = strings.TrimPrefix(srv.URL, "http://")
	}
	for _, k := range []string{"kept", "lost", "unsettled", "missing"} {
		r.keys[k] = true
	}
	r.proceeded("kept", 1, "c_1", "new")
	r.proceeded("lost", 1, "c_2", "new")
	r.proceeded("unsettled", 1, "c_3", "new")
	r.proceeded("unsettled", 1, "c_4", "new") // a second proceed of attempt 1
	r.proceeded("missing", 1, "c_5", "new")
	r.successes["kept"] = 1
	r.successes["unsettled"] = 1

	broken, err := r.verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !broken || !strings.Contains(got, "FAIL") {
		t.Fatalf("the check passed a broken ledger:\n%s", got)
	}
	for _, want := range []string{
		"losses 3 (proceeds missing 2, successes not succeeded 1), double proceeds 1",
		"lost: the proceed of attempt 1 (claim c_2) is not in the ledger",
		"missing: the proceed of attempt 1 (claim c_5) is not in the ledger",
		"unsettled: the success of attempt 1 was acknowledged, the ledger says unknown",
		"unsettled attempt 1: proceed with claim c_3 and again with c_4",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "kept:") {
		t.Errorf("the report blames the kept key:\n%s", got)
	}
}

func TestUsageMistakesExit2(t *testing.T) {
	t.Setenv("COMPANION_TEST_POSTGRES_URL", "")
	t.Setenv("COMPANION_TEST_MONGODB_URI", "")
	for _, args := range [][]string{
		{}, // no store
		{"--postgres", "postgres://x", "--replicas", "1"},
		{"--postgres", "postgres://x", "--db-stop", "true"}, // stop without start
		{"--nope"},
	} {
		var out, errs bytes.Buffer
		if code := run(context.Background(), args, &out, &errs); code != 2 {
			t.Errorf("%q: exit %d, want 2 (stderr %s)", args, code, errs.String())
		}
		if errs.Len() == 0 {
			t.Errorf("%q: nothing said on stderr", args)
		}
	}
}
