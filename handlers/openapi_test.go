package handlers_test

import (
	"context"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/replaysafe/companion/handlers"
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
		"/v1/items/{key}/resolve", "/v1/stats", "/metrics", "/healthz", "/readyz", "/openapi.json", "/v1/slack/actions"} {
		if doc.Paths.Find(p) == nil {
			t.Errorf("the document does not describe %s", p)
		}
	}
}
