package handlers_test

import (
	"context"
	"fmt"
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
