package handlers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/items"
)

// loadContract loads and validates the served OpenAPI document.
func loadContract(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(handlers.OpenAPI())
	if err != nil {
		t.Fatalf("the OpenAPI document does not load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the OpenAPI document is invalid: %v", err)
	}
	return doc
}

func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	for _, p := range []string{"/v1/before-write", "/v1/after-write", "/v1/reconcile", "/v1/batches/before-write",
		"/v1/batches/prepare", "/v1/batches/after-write", "/v1/batches/{batch_id}", "/v1/items", "/v1/items/{key}",
		"/v1/items/{key}/resolve", "/v1/stats", "/v1/stats/series", "/metrics", "/healthz", "/readyz", "/openapi.json", "/v1/slack/actions"} {
		if doc.Paths.Find(p) == nil {
			t.Errorf("the document does not describe %s", p)
		}
	}
}

// The document names every resolution outcome the ledger takes, in the request and in the stored resolution.
func TestOpenAPIResolveOutcomesAreTheLedgers(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	want := fmt.Sprint([]any{items.ResolveSucceeded, items.ResolveNotCommitted, items.ResolveAcknowledged})
	for _, name := range []string{"ResolveRequest", "Resolution"} {
		s := doc.Components.Schemas[name]
		if s == nil || s.Value.Properties["outcome"] == nil {
			t.Fatalf("the document has no %s.outcome", name)
		}
		if got := fmt.Sprint(s.Value.Properties["outcome"].Value.Enum); got != want {
			t.Errorf("%s.outcome enum = %s, want %s", name, got, want)
		}
	}
}

// The document names the codes of the edge and of the allow-lists, and every operation answers 421 to a
// misdirected Host; every operation that takes a token answers 429 to a client over its failure budget.
func TestOpenAPIDescribesTheEdgeAndTheAllowLists(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	enum := fmt.Sprint(doc.Components.Schemas["Error"].Value.Properties["error"].Value.Properties["code"].Value.Enum)
	for _, code := range []items.Code{handlers.CodeMisdirectedHost, handlers.CodeTooManyRequests, items.CodeOwnerNotAllowed, items.CodeDestinationNotAllowed} {
		if !strings.Contains(enum, string(code)) {
			t.Errorf("the error codes %s lack %s", enum, code)
		}
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.Responses.Value("421") == nil {
				t.Errorf("%s %s has no 421", method, path)
			}
			if public := op.Security != nil && len(*op.Security) == 0; !public && op.Responses.Value("429") == nil {
				t.Errorf("%s %s takes a token and has no 429", method, path)
			}
		}
	}
	if h := doc.Components.Responses["TooManyRequests"].Value.Headers["Retry-After"]; h == nil {
		t.Error("429 does not name its Retry-After header")
	}
}
