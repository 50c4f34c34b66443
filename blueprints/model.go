// Package blueprints holds one model of the guarded-write pattern and renders it into importable
// n8n workflows and Make blueprints.
//
// The pattern, in the seeds' words: before each external write the workflow asks companion
// (POST /v1/before-write) whether it may go ahead; on "proceed" it writes with the returned
// idempotency key, classifies what came back (an HTTP status, or a transport error before or after
// dispatch) and reports it (POST /v1/after-write); on "skip" it passes the stored result on; on
// "conflict" it stops and surfaces; on "reconcile" it looks the business reference up in the
// destination and reports the finding (POST /v1/reconcile) before asking again.
//
// Everything a template says about that contract (paths, decision words, error classes, the
// settings a builder fills in) comes from this file, so the n8n and the Make renderings, and the
// READMEs beside them, cannot drift apart. The rendered files are committed in n8n-templates/ and
// make-templates/ and a test fails when they differ from what the generator produces.
package blueprints

import (
	"fmt"
	"net/url"
	"strings"
)

// The companion endpoints the templates call (API.md). Paths are fixed by the contract.
const (
	PathBeforeWrite      = "/v1/before-write"
	PathAfterWrite       = "/v1/after-write"
	PathReconcile        = "/v1/reconcile"
	PathBatchBeforeWrite = "/v1/batches/before-write"
	PathBatchAfterWrite  = "/v1/batches/after-write"
	PathBatches          = "/v1/batches/"
	PathItems            = "/v1/items/"
	PathList             = "/v1/items"
)

// Dedupe says what the destination can do about a repeated write (API.md, before-write `dedupe`).
type Dedupe string

// The three dedupe modes of the contract.
const (
	// DedupeKey: the destination honours an Idempotency-Key, so an unknown outcome may be retried
	// with the same key.
	DedupeKey Dedupe = "key"
	// DedupeLookup: the destination can be searched by business reference, so an unknown outcome
	// is reconciled by a lookup before anything is sent again.
	DedupeLookup Dedupe = "lookup"
	// DedupeNone: neither; an unknown outcome waits for a person.
	DedupeNone Dedupe = "none"
)

// Valid reports whether d is one of the contract's words.
func (d Dedupe) Valid() bool { return d == DedupeKey || d == DedupeLookup || d == DedupeNone }

// Decision is before-write's answer word; the templates branch on it.
type Decision struct {
	Word    string
	Meaning string // what the branch does, for the READMEs
}

// Decisions are the four answers of POST /v1/before-write, in the order the branches are drawn.
var Decisions = []Decision{
	{"proceed", "the claim is yours: write now with header Idempotency-Key = idempotency_key, then the evidence goes to after-write. Never leave this branch without reporting."},
	{"skip", "do not write. reason `succeeded` carries the stored external_id and result, which are passed downstream as if the write had just happened; `in_progress`, `retry_later`, `attempts_exhausted`, `failed_permanent` and `awaiting_owner` end the item here (nothing is sent; a person is alerted where one is needed)."},
	{"conflict", "the same key arrived with a different payload after a write may have gone out. Nothing is sent; the run stops and surfaces it so a person approves a new intent with a new key."},
	{"reconcile", "the outcome of an earlier attempt is unknown and the destination is searchable (dedupe `lookup`): look the reference up, report found / absent / lookup_failed to /v1/reconcile, then ask before-write again."},
}

// WriteKind is one kind of write a builder puts in the slot, and the dedupe mode that is safe for it.
type WriteKind struct {
	Kind     string
	Examples string
	Dedupe   Dedupe
	Why      string
}

// WriteKinds say, per kind of write, which dedupe mode is safe: `key` lets companion answer an unknown
// outcome with a same-key retry, which is safe only when the destination itself drops the repeat.
var WriteKinds = []WriteKind{
	{"HTTP API that honours an idempotency key", "Stripe, Adyen, most payment and billing APIs, the sandbox receiver (HTTP Request node with header Idempotency-Key)",
		DedupeKey, "a same-key retry after an unknown outcome is dropped by the destination"},
	{"write that is idempotent by itself", "PUT to a fixed id, Sheets *Append or Update* matched on a key column, a database insert that ignores a duplicate key, a CRM *upsert* by external id",
		DedupeKey, "a repeat updates the same record instead of creating a second one"},
	{"create in a destination you can search by a reference you write into it", "CRM records (HubSpot, Salesforce) with a reference field, a sheet row with a reference column, invoices by number",
		DedupeLookup, "after an unknown outcome the lookup slot proves the record exists or is absent before anything is sent again"},
	{"message that cannot be taken back or searched", "Send Email (SMTP), Gmail, Slack, Teams, SMS, a webhook to a system without idempotency",
		DedupeNone, "the node sends no idempotency key and nothing can be searched: an unknown outcome waits for a person, never a second send"},
}

// TransportError maps a transport failure code, as n8n (axios/Node) and Make report it, to the
// after-write error class of the contract, and says whether a request may have left the caller.
type TransportError struct {
	Code       string
	Class      string
	Dispatched bool // false only when the failure is known to happen before the request was sent
}

// TransportErrors is the classification both renderings use. Refused and DNS failures happen
// before dispatch; a timeout or a reset happens after the request may have been committed, so its
// outcome is unknown (seed 000: "Treat a timeout after dispatch as unknown until you reconcile it").
var TransportErrors = []TransportError{
	{"ECONNREFUSED", "connection_refused", false},
	{"ENOTFOUND", "dns", false},
	{"EAI_AGAIN", "dns", false},
	{"ECONNABORTED", "timeout", true},
	{"ETIMEDOUT", "timeout", true},
	{"ESOCKETTIMEDOUT", "timeout", true},
	{"ECONNRESET", "connection_reset", true},
	{"EPIPE", "connection_reset", true},
	{"EPROTO", "tls", true},
	{"CERT_HAS_EXPIRED", "tls", true},
	{"UNABLE_TO_VERIFY_LEAF_SIGNATURE", "tls", true},
	{"DEPTH_ZERO_SELF_SIGNED_CERT", "tls", true},
}

// SMTPReply maps the class of an SMTP reply code (its first digit) that refused a message to the after-write
// error class of the contract. The mail server answered and holds no message, so nothing was committed
// either way; a 4xx (421, 451: try later) is a refusal for now, retried after a backoff, and a 5xx (550: no such
// mailbox) a refusal for good, never retried automatically (API.md, additions of 2026-12-07: class rejected).
type SMTPReply struct {
	Digit string
	Class string
}

// SMTPReplies is the SMTP table both renderings of the n8n Evidence and the Companion node use
// (n8n-node/nodes/Companion/evidence.ts SMTP_REPLY_CLASSES).
var SMTPReplies = []SMTPReply{
	{"4", "connection_refused"},
	{"5", "rejected"},
}

// Settings are the values a builder fills in before using a template. `companion templates
// render` takes them as flags; the committed templates use DefaultSettings, which point at a
// local `companion serve` and the local sandbox receiver so an import works as it is.
type Settings struct {
	// ServiceURL is companion's base URL, without a trailing slash.
	ServiceURL string
	// WriteURL is the example write in the slot: a POST that creates one record. The sandbox
	// receiver's /records by default.
	WriteURL string
	// LookupURL is the example lookup of the lookup-reconcile template: a GET that lists the
	// destination's records for a reference (the reference is appended as ?reference=).
	LookupURL string
	// CredentialName names the n8n "Bearer Auth" credential holding the companion token.
	CredentialName string
	// CredentialID is the id of that credential in the n8n instance; empty lets the builder pick
	// the credential after import.
	CredentialID string
	// Token is what the Make blueprints put in their Authorization header; Make has no portable
	// credential reference, so it is a placeholder to replace.
	Token string
	// WriteTimeoutMillis bounds the write; a longer wait is reported as a timeout (unknown).
	WriteTimeoutMillis int
	// ErrorWorkflowID is set as the n8n workflows' error workflow when not empty.
	ErrorWorkflowID string
	// ClaimWorkflowID and ReportWorkflowID are the ids of the imported sub-workflows companion: claim and
	// companion: report, which guarded-write-subworkflows calls; empty lets the builder pick them after import.
	ClaimWorkflowID, ReportWorkflowID string
}

// DefaultSettings are the settings of the committed templates.
func DefaultSettings() Settings {
	return Settings{
		ServiceURL:         "http://127.0.0.1:8080",
		WriteURL:           "http://127.0.0.1:9090/records",
		LookupURL:          "http://127.0.0.1:9090/records",
		CredentialName:     "companion",
		Token:              "REPLACE_WITH_YOUR_COMPANION_TOKEN",
		WriteTimeoutMillis: 10000,
	}
}

// Validate checks the settings a renderer relies on.
func (s Settings) Validate() error {
	for name, raw := range map[string]string{"url": s.ServiceURL, "write-url": s.WriteURL, "lookup-url": s.LookupURL} {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--%s: want an absolute http(s) URL, got %q", name, raw)
		}
	}
	if strings.HasSuffix(s.ServiceURL, "/") {
		return fmt.Errorf("--url: drop the trailing slash: %q", s.ServiceURL)
	}
	if s.CredentialName == "" {
		return fmt.Errorf("--credential: must not be empty")
	}
	if s.WriteTimeoutMillis < 1000 || s.WriteTimeoutMillis > 300000 {
		return fmt.Errorf("--write-timeout-ms: want 1000-300000, got %d", s.WriteTimeoutMillis)
	}
	return nil
}

// Shape says how many items one run writes.
type Shape int

// The two shapes of the guarded write.
const (
	// Single: one item per run, through POST /v1/before-write and /v1/after-write.
	Single Shape = iota
	// Batch: all items of a node in one POST /v1/batches/before-write, the proceeding ones written
	// one by one, all evidence in one POST /v1/batches/after-write.
	Batch
)

// Example is the business event a template is drawn around: what arrives at the trigger and how
// it becomes the claim's key, payload and reference. Builders replace it with their own mapping
// in the Settings step.
type Example struct {
	Title       string
	Event       string            // a sample trigger body, JSON
	KeyJS       string            // n8n expression (without ={{ }}) computing the key from $json.body
	ReferenceJS string            // … the business reference
	PayloadJS   string            // … the payload object
	KeyMake     string            // Make mapping computing the key from the webhook bundle 1
	RefMake     string            // … the reference
	PayloadMake string            // … the payload, as a JSON text with mappings
	Fields      map[string]string // sample field → meaning, for the README
}

// Template is one guarded-write pattern to render.
type Template struct {
	// Slug names the files: n8n-templates/<slug>.json, make-templates/<slug>.blueprint.json.
	Slug        string
	Title       string
	Description string
	Shape       Shape
	Dedupe      Dedupe
	// Destination is the destination name sent with every claim (companion configuration key).
	Destination string
	// TriggerGuard claims the trigger event itself at the start of the run (seed 003: "a stable
	// business key and an existence check at the start of the workflow"), so a trigger delivered
	// twice, or twice at once, runs the workflow once.
	TriggerGuard bool
	// WebhookPath is the trigger's path.
	WebhookPath string
	Example     Example
	// N8nOnly marks templates Make has no equivalent for (the Error Trigger workflow).
	N8nOnly bool
	// ErrorWorkflow marks the n8n error workflow.
	ErrorWorkflow bool
	// Sub is the template's part in the reusable n8n sub-workflows (n8n_sub.go).
	Sub SubWorkflow
}

// invoiceReminder is seed 000's running example: "send invoice reminder for invoice 742, reminder
// step 2", key invoice-742:reminder:2.
var invoiceReminder = Example{
	Title:       "invoice reminder",
	Event:       `{"invoice": "742", "recipient": "c-19", "amount": 120.5, "reminder": 2}`,
	KeyJS:       `'invoice-' + $json.body.invoice + ':reminder:' + $json.body.reminder`,
	ReferenceJS: `'invoice-' + $json.body.invoice + '-reminder-' + $json.body.reminder`,
	PayloadJS:   `{ invoice: String($json.body.invoice), recipient: $json.body.recipient, amount: $json.body.amount, reminder: $json.body.reminder }`,
	KeyMake:     `invoice-{{1.invoice}}:reminder:{{1.reminder}}`,
	RefMake:     `invoice-{{1.invoice}}-reminder-{{1.reminder}}`,
	PayloadMake: `{"invoice": "{{1.invoice}}", "recipient": "{{1.recipient}}", "amount": {{1.amount}}, "reminder": {{1.reminder}}}`,
	Fields: map[string]string{
		"invoice":   "the invoice the reminder is about",
		"recipient": "who receives it",
		"amount":    "the amount due",
		"reminder":  "which reminder step (1, 2, …): a later step is a new intent with a new key",
	},
}

// quote is seed 003's quote workflow: quote QT-2026-0417 created in the billing tool, checked by
// reference after a timeout, replayed once only when the check says it is absent.
var quote = Example{
	Title:       "quote",
	Event:       `{"reference": "QT-2026-0417", "customer": "c-88", "amount": 4200}`,
	KeyJS:       `'quote:' + $json.body.reference + ':create'`,
	ReferenceJS: `$json.body.reference`,
	PayloadJS:   `{ reference: $json.body.reference, customer: $json.body.customer, amount: $json.body.amount }`,
	KeyMake:     `quote:{{1.reference}}:create`,
	RefMake:     `{{1.reference}}`,
	PayloadMake: `{"reference": "{{1.reference}}", "customer": "{{1.customer}}", "amount": {{1.amount}}}`,
	Fields: map[string]string{
		"reference": "the quote's business reference, searchable in the billing tool",
		"customer":  "who the quote is for",
		"amount":    "the quoted amount",
	},
}

// Templates are the templates shipped in n8n-templates/ and make-templates/.
func Templates() []Template {
	return []Template{
		{
			Slug:         "guarded-write",
			Title:        "companion: guarded write (single item, webhook)",
			Description:  "One webhook event, one external write, made replay-safe: the trigger event is claimed first so a duplicate delivery runs nothing, then the write is claimed, sent with the ledger's idempotency key, classified and reported.",
			Shape:        Single,
			Dedupe:       DedupeKey,
			Destination:  "billing",
			TriggerGuard: true,
			WebhookPath:  "companion/guarded-write",
			Example:      invoiceReminder,
		},
		{
			Slug:        "batch-guarded-write",
			Title:       "companion: guarded write (batch)",
			Description: "All items of a node claimed in one batch call, the proceeding ones written one by one with their own idempotency keys, all outcomes reported in one batch call. A re-run of the same batch writes nothing that already succeeded.",
			Shape:       Batch,
			Dedupe:      DedupeKey,
			Destination: "billing",
			WebhookPath: "companion/batch-guarded-write",
			Example:     invoiceReminder,
		},
		{
			Slug:        "lookup-reconcile",
			Title:       "companion: guarded write with lookup-reconcile (quote QT-2026-0417)",
			Description: "For a destination that ignores idempotency keys but can be searched by reference: after an unknown outcome the next run looks the reference up, reports found / absent / lookup_failed, and writes again only when the lookup proved the record absent.",
			Shape:       Single,
			Dedupe:      DedupeLookup,
			Destination: "quotes",
			WebhookPath: "companion/lookup-reconcile",
			Example:     quote,
		},
		{
			Slug:          "error-workflow",
			Title:         "companion: error workflow (reports in-flight claims as unknown)",
			Description:   "Set as the error workflow of the guarded-write workflows. When one of their executions fails, it reports every claim that execution still held as unknown, so the next run reconciles or retries with the same key at once instead of waiting for the lease to expire.",
			N8nOnly:       true,
			ErrorWorkflow: true,
		},
		{
			Slug:        "companion-claim",
			Title:       SubClaimName,
			Description: "Sub-workflow (Execute Workflow Trigger): claims one write per item with before-write and returns the decision to route on with a Switch (`decision`, `reason`), with the idempotency key, the claim, the stored external id and `retry_after`.",
			Dedupe:      DedupeKey,
			N8nOnly:     true,
			Sub:         SubClaim,
		},
		{
			Slug:        "companion-report",
			Title:       SubReportName,
			Description: "Sub-workflow (Execute Workflow Trigger): takes the claim and the write node's output (success or error output), judges the evidence as the templates do (HTTP status, transport codes, SMTP replies, else unknown) and returns the after-write answer.",
			Dedupe:      DedupeKey,
			N8nOnly:     true,
			Sub:         SubReport,
		},
		{
			Slug:        "guarded-write-subworkflows",
			Title:       "companion: guarded write with the claim and report sub-workflows",
			Description: "The single-item guarded write of a webhook built from the two sub-workflows: Settings → Execute Workflow *companion: claim* → Switch → your write → Execute Workflow *companion: report* → the webhook's answer (200, 400, 409, 422, 503 + Retry-After).",
			Shape:       Single,
			Dedupe:      DedupeKey,
			Destination: "billing",
			WebhookPath: "companion/guarded-write-subworkflows",
			Example:     invoiceReminder,
			N8nOnly:     true,
			Sub:         SubCaller,
		},
	}
}

// BatchIDExpr is the n8n expression naming the batch of an execution: every claim a template
// makes carries it, so the error workflow can find the claims of a failed execution.
const BatchIDExpr = `'n8n-' + $workflow.id + '-exec-' + $execution.id`
