package handlers_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
)

// A control character or a bidi override in a field that names something is a 400 naming the field, in
// a single before-write, a batch and a preparation, after the checks the contract puts first (401, 415),
// and nothing is claimed; an error message a report carries is kept, escaped.
func TestTextFieldsRefuseControlCharactersOverHTTP(t *testing.T) {
	t.Parallel()
	svc := handlerstest.NewService(t, openSQLite(t), handlerstest.ServiceConfig{})
	for _, field := range []string{"reference", "destination", "owner", "execution_id"} {
		for _, v := range []string{"QT-\u001b[2J", "QT-\u0000", "QT-\u009b1m", "QT-\u202egnp.exe", "QT-\r\n"} {
			body := map[string]any{"key": "inv-1", "payload": map[string]any{"n": 1}, field: v}
			handlerstest.Expect(t, svc.BeforeWrite(body), http.StatusBadRequest, items.CodeInvalid, field)
			handlerstest.Expect(t, svc.Post("", "/v1/before-write", body), http.StatusUnauthorized, handlers.CodeUnauthorized, "")
			handlerstest.Expect(t, svc.Do(handlerstest.Request{Method: http.MethodPost, Path: "/v1/before-write", Token: handlerstest.WorkflowAcme,
				Body: body, ContentType: "text/plain"}), http.StatusUnsupportedMediaType, handlers.CodeUnsupportedMediaType, "")
			batch := map[string]any{"batch_id": "exec-1", "items": []any{handlerstest.BatchItem("inv-2", nil), handlerstest.BatchItem("inv-3", map[string]any{field: v})}}
			for _, path := range []string{"/v1/batches/before-write", "/v1/batches/prepare"} {
				handlerstest.Expect(t, svc.Post(handlerstest.WorkflowAcme, path, batch), http.StatusBadRequest, items.CodeInvalid, "items[1]."+field)
			}
		}
	}
	workflow := svc.Post(handlerstest.WorkflowAcme, "/v1/before-write", map[string]any{"workflow": "wf\u001b", "object": "o", "action": "a", "sequence": 1, "payload": map[string]any{}})
	handlerstest.Expect(t, workflow, http.StatusBadRequest, items.CodeInvalid, "workflow")
	for _, key := range []string{"inv-1", "inv-2", "inv-3"} {
		handlerstest.Expect(t, svc.Get(handlerstest.WorkflowAcme, "/v1/items/"+key), http.StatusNotFound, items.CodeNotFound, "")
	}

	c := svc.Claim("inv-4", map[string]any{"reference": "Rechnung 742 – Größe XL"})
	r := svc.AfterWrite(map[string]any{"key": "inv-4", "claim": c.Str("claim"), "outcome": "failed", "http_status": 422,
		"error": map[string]any{"message": "\u001b[31minvalid\u001b[0m recipient"}})
	handlerstest.Expect(t, r, http.StatusOK, "", "")
	if got := svc.Get(handlerstest.WorkflowAcme, "/v1/items/inv-4").Str("failure_message"); got != `\u001b[31minvalid\u001b[0m recipient` ||
		strings.ContainsRune(got, 0x1b) {
		t.Errorf("the failure message is kept as %q", got)
	}
}
