package console_test

import (
	"context"
	"strings"
	"testing"

	"github.com/replaysafe/companion/items"
)

// A reference, an owner and an error message holding control characters and bidi overrides, stored before the API
// refused them (written here to the store directly), are shown escaped on every page: no ESC, BEL, C1 or
// RLO reaches the browser.
func TestPagesEscapeControlCharactersOfStoredText(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{open: true})
	e.unknownItem("inv-1", "QT-1", "b-1", 0)
	if _, err := e.store.Transition(context.Background(), "default", "inv-1", func(it *items.Item) (*items.Item, error) {
		it.Reference, it.Owner = "QT-\x1b[2J\x1b]0;owned\x07", "U0\u009b31m\u202eKCAB"
		it.FailureMessage = "upstream \x1b[31mfailed"
		return it, nil
	}); err != nil {
		t.Fatal(err)
	}
	c := e.client()
	for _, path := range []string{"/console/", "/console/item?key=inv-1", "/console/batch?id=b-1", "/console/find?q=inv-1"} {
		status, body, _ := e.page(c, path)
		if status != 200 {
			t.Fatalf("%s: %d", path, status)
		}
		if i := strings.IndexAny(body, "\x1b\x07\u009b\u202e"); i >= 0 {
			t.Errorf("%s shows a control character at %d: %q", path, i, body[max(0, i-40):min(len(body), i+40)])
		}
		if path == "/console/item?key=inv-1" && (!strings.Contains(body, `QT-\u001b[2J\u001b]0;owned\u0007`) || !strings.Contains(body, `upstream \u001b[31mfailed`)) {
			t.Errorf("%s does not show the reference escaped:\n%s", path, body)
		}
	}
}
