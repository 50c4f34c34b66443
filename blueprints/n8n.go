package blueprints

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
)

// The n8n node types and versions the templates use, as n8n 2.41 registers them.
const (
	n8nWebhook      = "n8n-nodes-base.webhook"
	n8nSet          = "n8n-nodes-base.set"
	n8nHTTPRequest  = "n8n-nodes-base.httpRequest"
	n8nSwitch       = "n8n-nodes-base.switch"
	n8nCode         = "n8n-nodes-base.code"
	n8nStopAndError = "n8n-nodes-base.stopAndError"
	n8nSplitOut     = "n8n-nodes-base.splitOut"
	n8nMerge        = "n8n-nodes-base.merge"
	n8nErrorTrigger = "n8n-nodes-base.errorTrigger"
	n8nStickyNote   = "n8n-nodes-base.stickyNote"
	n8nRespond      = "n8n-nodes-base.respondToWebhook"
)

// N8nNodeVersions are the typeVersions the templates are written against; a test checks every
// rendered node uses one of these.
var N8nNodeVersions = map[string]float64{
	n8nWebhook:      2,
	n8nSet:          3.4,
	n8nHTTPRequest:  4.2,
	n8nSwitch:       3.2,
	n8nCode:         2,
	n8nStopAndError: 1,
	n8nSplitOut:     1,
	n8nMerge:        3.2,
	n8nErrorTrigger: 1,
	n8nStickyNote:   1,
	n8nRespond:      1.1,
	// The reusable sub-workflows (n8n_sub.go).
	n8nExecuteWorkflow:        1.4,
	n8nExecuteWorkflowTrigger: 1.2,
}

// N8nWorkflow is an n8n workflow as `n8n import:workflow` and the editor's import read it.
type N8nWorkflow struct {
	Name        string                    `json:"name"`
	Nodes       []N8nNode                 `json:"nodes"`
	Connections map[string]N8nConnections `json:"connections"`
	Active      bool                      `json:"active"`
	Settings    N8nSettings               `json:"settings"`
	Meta        N8nMeta                   `json:"meta"`
}

// N8nMeta carries what the template is, for people reading an exported copy.
type N8nMeta struct {
	TemplateCredsSetupCompleted bool   `json:"templateCredsSetupCompleted"`
	Companion                   string `json:"companionTemplate"`
}

// N8nSettings are the workflow settings the templates set.
type N8nSettings struct {
	ExecutionOrder string `json:"executionOrder"`
	// ErrorWorkflow is the id of the workflow run when an execution fails.
	ErrorWorkflow string `json:"errorWorkflow,omitempty"`
	// SaveDataErrorExecution keeps failed executions so the error workflow and people can look.
	SaveDataErrorExecution string `json:"saveDataErrorExecution"`
}

// N8nNode is one node. Parameters is one of the typed parameter structs below.
type N8nNode struct {
	Parameters       any                         `json:"parameters"`
	ID               string                      `json:"id"`
	Name             string                      `json:"name"`
	Type             string                      `json:"type"`
	TypeVersion      float64                     `json:"typeVersion"`
	Position         [2]int                      `json:"position"`
	WebhookID        string                      `json:"webhookId,omitempty"`
	Credentials      map[string]N8nCredentialRef `json:"credentials,omitempty"`
	OnError          string                      `json:"onError,omitempty"`
	RetryOnFail      bool                        `json:"retryOnFail,omitempty"`
	MaxTries         int                         `json:"maxTries,omitempty"`
	WaitBetweenTries int                         `json:"waitBetweenTries,omitempty"`
	Notes            string                      `json:"notes,omitempty"`
	NotesInFlow      bool                        `json:"notesInFlow,omitempty"`
}

// N8nCredentialRef points a node at a stored credential.
type N8nCredentialRef struct {
	ID   string `json:"id,omitempty"`
	Name string `json:"name"`
}

// N8nConnections are the outgoing connections of one node, per output index.
type N8nConnections struct {
	Main [][]N8nConnection `json:"main"`
}

// N8nConnection is one edge to the input of another node.
type N8nConnection struct {
	Node  string `json:"node"`
	Type  string `json:"type"`
	Index int    `json:"index"`
}

// WebhookParams configure the Webhook trigger (typeVersion 2).
type WebhookParams struct {
	HTTPMethod   string   `json:"httpMethod"`
	Path         string   `json:"path"`
	ResponseMode string   `json:"responseMode"`
	Options      struct{} `json:"options"`
}

// RespondParams configure a Respond to Webhook node (typeVersion 1.1) answering JSON.
type RespondParams struct {
	RespondWith  string         `json:"respondWith"`
	ResponseBody string         `json:"responseBody"`
	Options      RespondOptions `json:"options"`
}

// RespondOptions set the answer's status and headers.
type RespondOptions struct {
	ResponseCode    string          `json:"responseCode"`
	ResponseHeaders *RespondHeaders `json:"responseHeaders,omitempty"`
}

// RespondHeaders are the answer's headers.
type RespondHeaders struct {
	Entries []NameValue `json:"entries"`
}

// SetParams configure an Edit Fields (Set) node in manual mode (typeVersion 3.4).
type SetParams struct {
	Mode        string         `json:"mode"`
	Assignments SetAssignments `json:"assignments"`
	Options     struct{}       `json:"options"`
}

// SetAssignments wraps the assigned fields, as n8n stores them.
type SetAssignments struct {
	Assignments []SetAssignment `json:"assignments"`
}

// SetAssignment is one field of a Set node.
type SetAssignment struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Value string `json:"value"`
	Type  string `json:"type"`
}

// HTTPParams configure an HTTP Request node (typeVersion 4.2).
type HTTPParams struct {
	Method           string         `json:"method,omitempty"`
	URL              string         `json:"url"`
	Authentication   string         `json:"authentication,omitempty"`
	GenericAuthType  string         `json:"genericAuthType,omitempty"`
	SendQuery        bool           `json:"sendQuery,omitempty"`
	QueryParameters  *NameValueList `json:"queryParameters,omitempty"`
	SendHeaders      bool           `json:"sendHeaders,omitempty"`
	HeaderParameters *NameValueList `json:"headerParameters,omitempty"`
	SendBody         bool           `json:"sendBody,omitempty"`
	SpecifyBody      string         `json:"specifyBody,omitempty"`
	JSONBody         string         `json:"jsonBody,omitempty"`
	Options          HTTPOptions    `json:"options"`
}

// NameValueList is the fixedCollection n8n uses for headers and query parameters.
type NameValueList struct {
	Parameters []NameValue `json:"parameters"`
}

// NameValue is one header or query parameter.
type NameValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// HTTPOptions are the HTTP Request options the templates set.
type HTTPOptions struct {
	Batching   *HTTPBatching   `json:"batching,omitempty"`
	Pagination *HTTPPagination `json:"pagination,omitempty"`
	Response   *HTTPResponse   `json:"response,omitempty"`
	Timeout    int             `json:"timeout,omitempty"`
}

// HTTPPagination makes a node request page after page, updating parameters from each response, until
// an expression says the last page came; every page is one output item.
type HTTPPagination struct {
	Pagination struct {
		PaginationMode         string       `json:"paginationMode"`
		Parameters             PagingParams `json:"parameters"`
		PaginationCompleteWhen string       `json:"paginationCompleteWhen"`
		CompleteExpression     string       `json:"completeExpression"`
		LimitPagesFetched      bool         `json:"limitPagesFetched"`
		MaxRequests            int          `json:"maxRequests"`
	} `json:"pagination"`
}

// PagingParams are the parameters a paginated request updates.
type PagingParams struct {
	Parameters []PagingParam `json:"parameters"`
}

// PagingParam is one of them: where it goes (qs, headers, body), its name, and its value expression.
type PagingParam struct {
	Type  string `json:"type"`
	Name  string `json:"name"`
	Value string `json:"value"`
}

// cursorPages pages through a companion list by its next_cursor (GET /v1/batches/{id}, GET /v1/items):
// at most maxPages pages.
func cursorPages(maxPages int) *HTTPPagination {
	p := &HTTPPagination{}
	p.Pagination.PaginationMode = "updateAParameterInEachRequest"
	p.Pagination.Parameters.Parameters = []PagingParam{{Type: "qs", Name: "cursor", Value: "={{ $response.body.next_cursor }}"}}
	p.Pagination.PaginationCompleteWhen = "other"
	p.Pagination.CompleteExpression = "={{ !$response.body || !$response.body.next_cursor }}"
	p.Pagination.LimitPagesFetched = true
	p.Pagination.MaxRequests = maxPages
	return p
}

// HTTPBatching makes a node send its items one by one instead of all at once.
type HTTPBatching struct {
	Batch struct {
		BatchSize     int `json:"batchSize"`
		BatchInterval int `json:"batchInterval"`
	} `json:"batch"`
}

// HTTPResponse asks for the status and headers with the body, and for every status on the main
// output: the evidence is classified by the template, not by the node.
type HTTPResponse struct {
	Response struct {
		FullResponse bool `json:"fullResponse"`
		NeverError   bool `json:"neverError"`
	} `json:"response"`
}

// SwitchParams configure a Switch node in rules mode (typeVersion 3.2).
type SwitchParams struct {
	Rules   SwitchRules   `json:"rules"`
	Options SwitchOptions `json:"options"`
}

// SwitchRules lists the rules, one output each, in order.
type SwitchRules struct {
	Values []SwitchRule `json:"values"`
}

// SwitchRule sends items whose conditions hold to a named output.
type SwitchRule struct {
	Conditions   FilterValue `json:"conditions"`
	RenameOutput bool        `json:"renameOutput"`
	OutputKey    string      `json:"outputKey"`
}

// FilterValue is n8n's filter parameter (conditions version 2).
type FilterValue struct {
	Options    FilterOptions     `json:"options"`
	Conditions []FilterCondition `json:"conditions"`
	Combinator string            `json:"combinator"`
}

// FilterOptions of a filter.
type FilterOptions struct {
	CaseSensitive  bool   `json:"caseSensitive"`
	LeftValue      string `json:"leftValue"`
	TypeValidation string `json:"typeValidation"`
	Version        int    `json:"version"`
}

// FilterCondition compares one value.
type FilterCondition struct {
	ID         string         `json:"id"`
	LeftValue  string         `json:"leftValue"`
	RightValue string         `json:"rightValue"`
	Operator   FilterOperator `json:"operator"`
}

// FilterOperator names the comparison.
type FilterOperator struct {
	Type      string `json:"type"`
	Operation string `json:"operation"`
}

// SwitchOptions: the fallback output catches any answer the rules do not name.
type SwitchOptions struct {
	FallbackOutput       string `json:"fallbackOutput,omitempty"`
	RenameFallbackOutput string `json:"renameFallbackOutput,omitempty"`
}

// CodeParams configure a Code node (typeVersion 2, JavaScript).
type CodeParams struct {
	Mode   string `json:"mode,omitempty"`
	JSCode string `json:"jsCode"`
}

// StopAndErrorParams fail the execution with a message.
type StopAndErrorParams struct {
	ErrorMessage string `json:"errorMessage"`
}

// SplitOutParams turn an array field into one item per element.
type SplitOutParams struct {
	FieldToSplitOut string   `json:"fieldToSplitOut"`
	Options         struct{} `json:"options"`
}

// MergeParams append the items of all inputs (typeVersion 3.2, mode append is the default), two
// unless NumberInputs says more.
type MergeParams struct {
	NumberInputs int `json:"numberInputs,omitempty"`
}

// EmptyParams are the parameters of nodes that take none.
type EmptyParams struct{}

// StickyNoteParams are the canvas notes that mark the slots.
type StickyNoteParams struct {
	Content string `json:"content"`
	Height  int    `json:"height"`
	Width   int    `json:"width"`
	Color   int    `json:"color"`
}

// n8nGraph builds one workflow; ids are derived from the template slug and node name so the output
// is byte-stable.
type n8nGraph struct {
	slug  string
	nodes []N8nNode
	conns map[string]N8nConnections
}

func newN8nGraph(slug string) *n8nGraph {
	return &n8nGraph{slug: slug, conns: map[string]N8nConnections{}}
}

// stableID derives a UUID-shaped id from the parts, so re-rendering never changes a file.
func stableID(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	h := hex.EncodeToString(sum[:16])
	return h[0:8] + "-" + h[8:12] + "-4" + h[13:16] + "-8" + h[17:20] + "-" + h[20:32]
}

func (g *n8nGraph) add(n N8nNode) N8nNode {
	n.ID = stableID(g.slug, n.Name)
	if v, ok := N8nNodeVersions[n.Type]; ok && n.TypeVersion == 0 {
		n.TypeVersion = v
	}
	g.nodes = append(g.nodes, n)
	return n
}

// connect links output `out` of `from` to the first input of `to`.
func (g *n8nGraph) connect(from string, out int, to string) { g.connectInput(from, out, to, 0) }

// connectInput links output `out` of `from` to input `in` of `to`.
func (g *n8nGraph) connectInput(from string, out int, to string, in int) {
	c := g.conns[from]
	for len(c.Main) <= out {
		c.Main = append(c.Main, []N8nConnection{})
	}
	c.Main[out] = append(c.Main[out], N8nConnection{Node: to, Type: "main", Index: in})
	g.conns[from] = c
}

func (g *n8nGraph) workflow(t Template, s Settings) N8nWorkflow {
	wf := N8nWorkflow{
		Name:        t.Title,
		Nodes:       g.nodes,
		Connections: g.conns,
		Settings:    N8nSettings{ExecutionOrder: "v1", SaveDataErrorExecution: "all"},
		Meta:        N8nMeta{Companion: t.Slug},
	}
	if !t.ErrorWorkflow {
		wf.Settings.ErrorWorkflow = s.ErrorWorkflowID
	}
	return wf
}

// companionHTTP is an HTTP Request node calling companion with the Bearer credential.
func companionHTTP(s Settings, name, method, urlExpr, bodyExpr string, pos [2]int) N8nNode {
	p := HTTPParams{
		Method:          method,
		URL:             urlExpr,
		Authentication:  "genericCredentialType",
		GenericAuthType: "httpBearerAuth",
	}
	if bodyExpr != "" {
		p.SendBody, p.SpecifyBody, p.JSONBody = true, "json", bodyExpr
	}
	return N8nNode{
		Name: name, Type: n8nHTTPRequest, Position: pos, Parameters: p,
		Credentials: map[string]N8nCredentialRef{"httpBearerAuth": {ID: s.CredentialID, Name: s.CredentialName}},
	}
}

// reportHTTP is a companion call that only records knowledge (after-write, reconcile): an
// identical repeat answers "unchanged", and a 503 means "not recorded, retry", so n8n's Retry On
// Fail is safe here — unlike on the write.
func reportHTTP(s Settings, name, path, bodyExpr string, pos [2]int) N8nNode {
	return reportHTTPAt(s, name, "={{ $('Settings').item.json.companion_url }}", path, bodyExpr, pos)
}

// reportHTTPAt is reportHTTP to the companion URL of the expression base (a workflow without a Settings
// node, or one that reads it once for all items).
func reportHTTPAt(s Settings, name, base, path, bodyExpr string, pos [2]int) N8nNode {
	n := companionHTTP(s, name, "POST", base+path, bodyExpr, pos)
	n.RetryOnFail, n.MaxTries, n.WaitBetweenTries = true, 5, 2000
	n.Notes = "Records the outcome in the ledger. Retry On Fail is on here on purpose: repeating a report is safe (unchanged). Never turn it on for the write."
	return n
}

func fullResponse() *HTTPResponse {
	r := &HTTPResponse{}
	r.Response.FullResponse, r.Response.NeverError = true, true
	return r
}

// decisionSwitch branches on before-write's decision; any other word goes to the fallback output.
func decisionSwitch(slug, name string, words []string, pos [2]int) N8nNode {
	n := switchOn(slug, name, "decision", words, pos)
	p := n.Parameters.(SwitchParams)
	p.Options = SwitchOptions{FallbackOutput: "extra", RenameFallbackOutput: "other"}
	n.Parameters = p
	return n
}

// switchOn sends items to the output named after the value of $json[field].
func switchOn(slug, name, field string, words []string, pos [2]int) N8nNode {
	var p SwitchParams
	for _, w := range words {
		p.Rules.Values = append(p.Rules.Values, SwitchRule{
			Conditions: FilterValue{
				Options:    FilterOptions{CaseSensitive: true, TypeValidation: "strict", Version: 2},
				Conditions: []FilterCondition{{ID: stableID(slug, name, w), LeftValue: "={{ $json." + field + " }}", RightValue: w, Operator: FilterOperator{Type: "string", Operation: "equals"}}},
				Combinator: "and",
			},
			RenameOutput: true, OutputKey: w,
		})
	}
	return N8nNode{Name: name, Type: n8nSwitch, Position: pos, Parameters: p}
}

func codeNode(name, mode, js string, pos [2]int) N8nNode {
	return N8nNode{Name: name, Type: n8nCode, Position: pos, Parameters: CodeParams{Mode: mode, JSCode: js}}
}

func sticky(name, content string, pos [2]int, w, h, color int) N8nNode {
	return N8nNode{Name: name, Type: n8nStickyNote, Position: pos, Parameters: StickyNoteParams{Content: content, Width: w, Height: h, Color: color}}
}

// eventExpr rewrites an example expression written against `$e.` for where the event sits.
func eventExpr(js, at string) string { return strings.ReplaceAll(js, "$json.body", at) }

// settingsNode is the one node a builder edits to point the template at their service and data.
func settingsNode(t Template, s Settings, at string, pos [2]int) N8nNode {
	ex := t.Example
	field := func(name, typ, value string) SetAssignment {
		return SetAssignment{ID: stableID(t.Slug, "Settings", name), Name: name, Value: value, Type: typ}
	}
	as := []SetAssignment{
		field("companion_url", "string", s.ServiceURL),
		field("destination", "string", t.Destination),
		field("dedupe", "string", string(t.Dedupe)),
		field("write_url", "string", s.WriteURL),
		// Where the write node puts the id of what it wrote: the first of these paths in its output that
		// holds a value (an HTTP Request's body.id, a record's id, Send Email's messageId).
		field("external_id_fields", "string", ExternalIDFields),
	}
	if t.Dedupe == DedupeLookup {
		as = append(as, field("lookup_url", "string", s.LookupURL))
	}
	as = append(as,
		field("key", "string", "={{ "+eventExpr(ex.KeyJS, at)+" }}"),
		field("reference", "string", "={{ "+eventExpr(ex.ReferenceJS, at)+" }}"),
		field("payload", "object", "={{ "+eventExpr(ex.PayloadJS, at)+" }}"),
		field("batch_id", "string", "={{ "+BatchIDExpr+" }}"),
	)
	if t.TriggerGuard {
		as = append(as,
			field("trigger_key", "string", "={{ "+eventExpr(ex.KeyJS, at)+" + ':trigger' }}"),
			field("trigger_destination", "string", "n8n-triggers"),
		)
	}
	return N8nNode{
		Name: "Settings", Type: n8nSet, Position: pos,
		Parameters: SetParams{Mode: "manual", Assignments: SetAssignments{Assignments: as}},
		Notes:      "FILL IN: companion_url, destination (as named in companion's config), dedupe, write_url; map key / reference / payload from your trigger. The key names one business effect and must be the same on every re-run.",
	}
}

// addAnswer adds the end of a single-item webhook run at x: the answer (status, Retry-After), then Done,
// or a stop with an error when the run ended in anything but its effect.
func (g *n8nGraph) addAnswer(slug string, x, y int) {
	g.addAnswerWith(slug, codeNode("Answer", "runOnceForAllItems", answerJS, [2]int{x, y}),
		codeNode("Done", "runOnceForAllItems", doneJS, [2]int{x + 880, y - 100}))
}

// addAnswerWith adds the end of a webhook run around its Answer node (at x, y), which gives one item
// {status, retry_after, later, end, body}: a Respond node answers with it, then done goes on to the
// Done node and surface stops the execution with body.message.
func (g *n8nGraph) addAnswerWith(slug string, answer, done N8nNode) {
	x, y := answer.Position[0], answer.Position[1]
	g.add(answer)
	g.add(switchOn(slug, "Redeliver later?", "later", []string{"now", "later"}, [2]int{x + 220, y}))
	g.connect("Answer", 0, "Redeliver later?")
	respond := func(name string, headers *RespondHeaders, pos [2]int) {
		g.add(N8nNode{Name: name, Type: n8nRespond, Position: pos, Parameters: RespondParams{
			RespondWith: "json", ResponseBody: "={{ JSON.stringify($json.body) }}",
			Options: RespondOptions{ResponseCode: "={{ $json.status }}", ResponseHeaders: headers},
		}})
	}
	respond("Respond", nil, [2]int{x + 440, y - 100})
	respond("Respond: redeliver later", &RespondHeaders{Entries: []NameValue{{Name: "Retry-After", Value: "={{ $json.retry_after }}"}}}, [2]int{x + 440, y + 100})
	g.connect("Redeliver later?", 0, "Respond")
	g.connect("Redeliver later?", 1, "Respond: redeliver later")
	// done → continue; surface → stop the execution with an error so a person sees it.
	g.add(switchOn(slug, "Needs a person?", "end", []string{"done", "surface"}, [2]int{x + 660, y}))
	g.connect("Respond", 0, "Needs a person?")
	g.connect("Respond: redeliver later", 0, "Needs a person?")
	g.add(done)
	g.connect("Needs a person?", 0, "Done")
	g.add(N8nNode{Name: "Stop: needs a person", Type: n8nStopAndError, Position: [2]int{x + 880, y + 100},
		Parameters: StopAndErrorParams{ErrorMessage: "={{ $json.body.message }}"}})
	g.connect("Needs a person?", 1, "Stop: needs a person")
}

// slotNote is the sticky note over the write slot: what to keep, and which dedupe is safe for which write.
func slotNote(batch bool) string {
	var b strings.Builder
	b.WriteString("## Your write goes here\nReplace **" + NodeWrite + "** with any write node (HTTP Request, Send Email, Gmail, Sheets, Slack, …). Keep:\n" +
		"- Settings → On Error: *Continue (using error output)*, both outputs connected as they are\n" +
		"- **Retry On Fail: OFF** (a retry here can duplicate the write; companion decides retries)\n" +
		"- Settings node → `external_id_fields`: where your node puts the id it wrote\n" +
		"- HTTP Request: header `Idempotency-Key` = `{{ $json.idempotency_key }}`, *Include Response Headers and Status*, *Never Error*\n")
	if batch {
		b.WriteString("- Options → Batching: 1 item per batch (one by one)\n")
	}
	b.WriteString("\n**Which `dedupe` (Settings)**\n")
	for _, k := range WriteKinds {
		fmt.Fprintf(&b, "- %s → `%s`\n", k.Kind, k.Dedupe)
	}
	return b.String()
}

// ExternalIDFields is the default of Settings → external_id_fields.
const ExternalIDFields = "body.id, id, messageId"

// Node names shared by the renderers and the e2e runner.
const (
	NodeWrite       = "YOUR WRITE: create the record"
	NodeLookup      = "YOUR LOOKUP: find by reference"
	NodeBeforeWrite = "Before-write"
	NodeWriteError  = "Write error"
	// NodeCheckDelivery checks the delivery's fields before any key is built.
	NodeCheckDelivery = "Check delivery"
)

// writeErrorJS marks an item of the write's error output: n8n gives the failing node's input item
// with the error merged in (error is a message for most nodes, an object for some).
const writeErrorJS = `// The write node's error output: nothing here is a result. Evidence judges the error.
return { json: { write_error: $json.error ?? 'the write node failed without saying why' } };`

// guardedWriteTail adds write → evidence → after-write → outcome, fed by `from` output `out`.
// It returns the name of the node that ends the proceed path.
func (g *n8nGraph) guardedWriteTail(s Settings, claimNode string, batch bool, x, y int) (writeName, lastName string) {
	h := HTTPParams{
		Method:      "POST",
		URL:         "={{ $('Settings').item.json.write_url }}",
		SendHeaders: true,
		HeaderParameters: &NameValueList{Parameters: []NameValue{
			{Name: "Idempotency-Key", Value: "={{ $json.idempotency_key }}"},
		}},
		SendBody: true, SpecifyBody: "json",
		JSONBody: "={{ JSON.stringify(Object.assign({}, $('Settings').item.json.payload, { reference: $('Settings').item.json.reference })) }}",
		Options:  HTTPOptions{Response: fullResponse(), Timeout: s.WriteTimeoutMillis},
	}
	if batch {
		h.URL = "={{ $json.write_url }}"
		h.JSONBody = "={{ JSON.stringify(Object.assign({}, $json.payload, { reference: $json.reference })) }}"
		h.Options.Batching = &HTTPBatching{}
		h.Options.Batching.Batch.BatchSize = 1
	}
	g.add(N8nNode{
		Name: NodeWrite, Type: n8nHTTPRequest, Position: [2]int{x, y}, Parameters: h,
		OnError: "continueErrorOutput",
		Notes:   "THE SLOT: replace with any write node, keeping On Error = Continue (using error output) with both outputs connected, and Retry On Fail OFF. An HTTP Request also keeps the header Idempotency-Key = {{ $json.idempotency_key }}, Never Error + Include Response Headers and Status.",
	})
	evidence := "Evidence"
	// The error output goes through "Write error", which marks the item, so that Evidence never takes a
	// node's failure for its result.
	g.add(codeNode(NodeWriteError, "runOnceForEachItem", writeErrorJS, [2]int{x + 220, y + 180}))
	g.connect(NodeWrite, 1, NodeWriteError)
	// One Merge so that results and errors reach Evidence, and then the report, in one run: connected to
	// Evidence directly, the two outputs would each run the rest of the workflow, and the first to reach the
	// end could stop the execution (a person is needed) before the other output's items were reported.
	g.add(N8nNode{Name: "Both outcomes", Type: n8nMerge, Position: [2]int{x + 440, y}, Parameters: MergeParams{},
		Notes: "The write's results and errors meet here, so every item is reported before any is answered."})
	g.connectInput(NodeWrite, 0, "Both outcomes", 0)
	g.connectInput(NodeWriteError, 0, "Both outcomes", 1)
	g.add(codeNode(evidence, "runOnceForEachItem", evidenceJS(claimNode), [2]int{x + 660, y}))
	g.connect("Both outcomes", 0, evidence)
	if batch {
		return NodeWrite, evidence
	}
	g.add(reportHTTP(s, "After-write", PathAfterWrite, "={{ JSON.stringify($json) }}", [2]int{x + 880, y}))
	g.connect(evidence, 0, "After-write")
	g.add(codeNode("Write outcome", "runOnceForEachItem", writeOutcomeJS, [2]int{x + 1100, y}))
	g.connect("After-write", 0, "Write outcome")
	return NodeWrite, "Write outcome"
}

// requiredFieldsJS is the JS array of the delivery's fields that the key, reference and payload are
// built from, sorted.
func requiredFieldsJS(t Template) string {
	var required []string
	for f := range t.Example.Fields {
		required = append(required, "'"+f+"'")
	}
	sort.Strings(required)
	return "[" + strings.Join(required, ", ") + "]"
}

// NodeClaimAnswer is the Code node after the single templates' Before-write: before-write runs with Never
// Error, and this node gives the decision to route on, or the refusal companion answered.
const NodeClaimAnswer = "Claim answer"

// beforeWriteHTTP is a before-write request that gives every status to the next node (Include Response
// Headers and Status, Never Error), so a request companion refuses is answered, not failed with n8n's 500.
func beforeWriteHTTP(s Settings, name, urlExpr, bodyExpr string, pos [2]int) N8nNode {
	n := companionHTTP(s, name, "POST", urlExpr, bodyExpr, pos)
	p := n.Parameters.(HTTPParams)
	p.Options.Response = fullResponse()
	n.Parameters = p
	// No Retry On Fail: n8n sends the items' requests together and retries a failing node as a whole, so a
	// retry would ask again the items already claimed (they meet their own claims, skip/in_progress, are
	// never written and expire into unknown). On Error → Continue (regular output) gives the one item that
	// got no answer its error in place of a response; the answer node marks it unanswered (503, deliver again).
	n.OnError = "continueRegularOutput"
	n.Notes = "POST /v1/before-write with Never Error and On Error = Continue: every answer, and an item that got no answer at all, goes on to the next node, which routes a decision and answers a refusal (400) with companion's words, no answer with 503. Keep Retry On Fail OFF: it re-runs the node for all items."
	return n
}

// n8nSingle renders the single-item templates (with or without the trigger guard, key or lookup). They
// take any number of items (a builder's trigger or a Split Out may give several): every route of an item
// ends in the Merge All items, so the webhook is answered once, after every item was reported.
func n8nSingle(t Template, s Settings) N8nWorkflow {
	g := newN8nGraph(t.Slug)
	y := 300
	g.add(N8nNode{
		Name: "Webhook", Type: n8nWebhook, Position: [2]int{0, y}, WebhookID: stableID(t.Slug, "webhook"),
		Parameters: WebhookParams{HTTPMethod: "POST", Path: t.WebhookPath, ResponseMode: "responseNode"},
		Notes:      "Trigger. Example body: " + t.Example.Event + ". Answered by the Respond nodes at the end (200, 400, 409, 422, 503 + Retry-After).",
	})
	g.add(codeNode(NodeCheckDelivery, "runOnceForEachItem", strings.Replace(checkDeliveryJS, "REQUIRED", requiredFieldsJS(t), 1), [2]int{220, y}))
	g.connect("Webhook", 0, NodeCheckDelivery)
	g.add(switchOn(t.Slug, "Delivery complete?", "delivery", []string{"complete", "incomplete"}, [2]int{440, y}))
	g.connect(NodeCheckDelivery, 0, "Delivery complete?")
	g.add(settingsNode(t, s, "$json.body", [2]int{660, y}))
	g.connect("Delivery complete?", 0, "Settings")
	x := 880
	prev := "Settings"
	if t.TriggerGuard {
		g.add(beforeWriteHTTP(s, "Claim trigger event", "={{ $json.companion_url }}"+PathBeforeWrite,
			"={{ JSON.stringify({ key: $json.trigger_key, payload: $json.payload, destination: $json.trigger_destination, dedupe: 'key', reference: $json.reference, batch_id: $json.batch_id, batch_index: 0, execution_id: $execution.id }) }}",
			[2]int{x, y}))
		g.connect(prev, 0, "Claim trigger event")
		g.add(codeNode("Trigger claim answer", "runOnceForEachItem", beforeWriteAnswerJS("$('Settings').item.json.trigger_key"), [2]int{x + 220, y}))
		g.connect("Claim trigger event", 0, "Trigger claim answer")
		g.add(decisionSwitch(t.Slug, "First delivery?", []string{"proceed", "skip"}, [2]int{x + 440, y}))
		g.connect("Trigger claim answer", 0, "First delivery?")
		// Only a finished or a running delivery of the same event stops here. Any other skip (the trigger's
		// attempts spent, a retry time, an owner) goes on to the write's own before-write, which decides:
		// the trigger guard never stops a write that the ledger would let through.
		g.add(duplicateSwitch(t.Slug, [2]int{x + 660, y + 260}))
		g.connect("First delivery?", 1, "Duplicate?")
		g.add(codeNode("Duplicate trigger: stop", "runOnceForEachItem", `// This event is already being handled, or was: a duplicate delivery runs nothing.
return { json: { duplicate: true, key: $json.key, decision: $json.decision, reason: $json.reason, state: $json.state, retry_after: $json.retry_after ?? null } };`, [2]int{x + 880, y + 260}))
		g.connect("Duplicate?", 0, "Duplicate trigger: stop")
		// A conflict on the trigger (the same event with other content) is surfaced like the write's; a refused
		// trigger claim is answered with companion's words.
		g.add(codeNode("Trigger: other answer", "runOnceForEachItem", otherAnswerJS, [2]int{x + 880, y + 440}))
		g.connect("First delivery?", 2, "Trigger: other answer")
		// The first deliveries and the trigger claims that are not duplicates claim the write in one run.
		g.add(N8nNode{Name: "Claim the write", Type: n8nMerge, Position: [2]int{x + 880, y}, Parameters: MergeParams{},
			Notes: "First deliveries, and trigger claims that are not duplicates, go on to the write's before-write together."})
		g.connectInput("First delivery?", 0, "Claim the write", 0)
		g.connectInput("Duplicate?", 1, "Claim the write", 1)
		prev, x = "Claim the write", x+1100
	}
	bw := "={{ JSON.stringify({ key: $('Settings').item.json.key, payload: $('Settings').item.json.payload, destination: $('Settings').item.json.destination, dedupe: $('Settings').item.json.dedupe, reference: $('Settings').item.json.reference, batch_id: $('Settings').item.json.batch_id, batch_index: BATCH_INDEX, execution_id: $execution.id }) }}"
	idx := "0"
	if t.TriggerGuard {
		idx = "1"
	}
	g.add(beforeWriteHTTP(s, NodeBeforeWrite, "={{ $('Settings').item.json.companion_url }}"+PathBeforeWrite, strings.Replace(bw, "BATCH_INDEX", idx, 1), [2]int{x, y}))
	g.connect(prev, 0, NodeBeforeWrite)
	g.add(codeNode(NodeClaimAnswer, "runOnceForEachItem", beforeWriteAnswerJS("$('Settings').item.json.key"), [2]int{x + 220, y}))
	g.connect(NodeBeforeWrite, 0, NodeClaimAnswer)
	x += 220
	words := []string{"proceed", "skip", "conflict"}
	if t.Dedupe == DedupeLookup {
		words = append(words, "reconcile")
	}
	g.add(decisionSwitch(t.Slug, "Decision", words, [2]int{x + 220, y}))
	g.connect(NodeClaimAnswer, 0, "Decision")
	lookup := t.Dedupe == DedupeLookup
	// In lookup-reconcile the write takes the items that proceed at once and those that proceed after a
	// lookup proved their record absent, in one run (To the write): the claim Evidence reports is the item
	// that went into the write.
	wx, claim := x+440, NodeClaimAnswer
	if lookup {
		wx, claim = x+660, "To the write"
		g.add(N8nNode{Name: claim, Type: n8nMerge, Position: [2]int{x + 440, y}, Parameters: MergeParams{},
			Notes: "The claims that proceed at once and those that proceed after the lookup proved the record absent go to the write together."})
		g.connectInput("Decision", 0, claim, 0)
		g.connect(claim, 0, NodeWrite)
	} else {
		g.connect("Decision", 0, NodeWrite)
	}
	g.add(sticky("Slot note", slotNote(false), [2]int{wx - 60, y - 420}, 520, 360, 5))
	_, last := g.guardedWriteTail(s, claim, false, wx, y)
	g.add(codeNode("Stored result", "runOnceForEachItem", storedResultJS, [2]int{x + 660, y + 260}))
	g.connect("Decision", 1, "Stored result")
	g.add(codeNode("Surface", "runOnceForEachItem", surfaceJS, [2]int{x + 660, y + 440}))
	g.connect("Decision", 2, "Surface")
	fallback := 3
	// The nodes that end an item, each feeding its own input of All items (the Merge before the answer), so that
	// every route's items meet in one run of the answer: the write's outcome, then these.
	ends := []string{"Stored result", "Surface", "Other answer"}
	if lookup {
		fallback = 4
		ly := y + 800
		g.add(N8nNode{
			Name: NodeLookup, Type: n8nHTTPRequest, Position: [2]int{x + 440, ly},
			Parameters: HTTPParams{
				Method: "GET", URL: "={{ $('Settings').item.json.lookup_url }}",
				SendQuery:       true,
				QueryParameters: &NameValueList{Parameters: []NameValue{{Name: "reference", Value: "={{ $('Settings').item.json.reference }}"}}},
				Options:         HTTPOptions{Response: fullResponse(), Timeout: s.WriteTimeoutMillis},
			},
			OnError: "continueErrorOutput",
			Notes:   "THE LOOKUP SLOT: search your destination for the business reference. Keep Never Error, Include Response Headers and Status, and On Error = Continue (using error output).",
		})
		g.connect("Decision", 3, NodeLookup)
		g.add(codeNode("Finding", "runOnceForEachItem", findingJS, [2]int{x + 660, ly}))
		g.connect(NodeLookup, 0, "Finding")
		g.connect(NodeLookup, 1, "Finding")
		g.add(reportHTTP(s, "Reconcile", PathReconcile, "={{ JSON.stringify($json) }}", [2]int{x + 880, ly}))
		g.connect("Finding", 0, "Reconcile")
		// Then before-write again, once: it now answers skip (found), proceed (absent) or awaiting_owner. Its own
		// nodes, not a loop back to Before-write, so that every item's end still meets the others' in one run of
		// All items (a loop would bring the reconciled items there in a second run, answered separately).
		g.add(beforeWriteHTTP(s, "Before-write again", "={{ $('Settings').item.json.companion_url }}"+PathBeforeWrite, strings.Replace(bw, "BATCH_INDEX", idx, 1), [2]int{x + 1100, ly}))
		g.connect("Reconcile", 0, "Before-write again")
		g.add(codeNode("Claim answer again", "runOnceForEachItem", beforeWriteAnswerJS("$('Settings').item.json.key"), [2]int{x + 1320, ly}))
		g.connect("Before-write again", 0, "Claim answer again")
		g.add(decisionSwitch(t.Slug, "Decision again", []string{"proceed", "skip"}, [2]int{x + 1540, ly}))
		g.connect("Claim answer again", 0, "Decision again")
		g.connectInput("Decision again", 0, claim, 1)
		g.add(codeNode("Stored result again", "runOnceForEachItem", storedResultJS, [2]int{x + 1760, ly}))
		g.connect("Decision again", 1, "Stored result again")
		g.add(codeNode("Other answer again", "runOnceForEachItem", otherAnswerJS, [2]int{x + 1760, ly + 180}))
		g.connect("Decision again", 2, "Other answer again")
		ends = append(ends, "Stored result again", "Other answer again")
	}
	// A request companion refused, or an answer this template does not handle.
	g.add(codeNode("Other answer", "runOnceForEachItem", otherAnswerJS, [2]int{x + 660, y + 620}))
	g.connect("Decision", fallback, "Other answer")

	ex := wx + 1320
	ends = append([]string{last}, ends...)
	if t.TriggerGuard {
		// Every end of the write meets in Ends, so the trigger claims are reported in one run.
		g.add(N8nNode{Name: "Ends", Type: n8nMerge, Position: [2]int{ex, y}, Parameters: MergeParams{NumberInputs: len(ends)}})
		for i, from := range ends {
			g.connectInput(from, 0, "Ends", i)
		}
		g.add(codeNode("Run outcome", "runOnceForEachItem", runOutcomeJS, [2]int{ex + 220, y}))
		g.connect("Ends", 0, "Run outcome")
		g.add(switchOn(t.Slug, "Trigger claimed?", "trigger", []string{"claimed", "not_claimed"}, [2]int{ex + 440, y}))
		g.connect("Run outcome", 0, "Trigger claimed?")
		g.add(reportHTTP(s, "Record trigger outcome", PathAfterWrite, "={{ JSON.stringify($json.report) }}", [2]int{ex + 660, y}))
		g.connect("Trigger claimed?", 0, "Record trigger outcome")
		g.add(codeNode("Outcome", "runOnceForEachItem", `// What this run did to the write; the webhook answers with it.
return { json: $('Run outcome').item.json.write };`, [2]int{ex + 880, y}))
		g.connect("Record trigger outcome", 0, "Outcome")
		g.add(codeNode("Outcome: trigger not claimed", "runOnceForEachItem", `// What this run did to the write (its trigger claim was not this run's: nothing to report for it).
return { json: $json.write };`, [2]int{ex + 880, y + 180}))
		g.connect("Trigger claimed?", 1, "Outcome: trigger not claimed")
		ends = []string{"Outcome", "Outcome: trigger not claimed", "Duplicate trigger: stop", "Trigger: other answer"}
		ex += 1100
	}
	g.addAllItems(ends, "Delivery complete?", ex, y)
	g.addAnswer(t.Slug, ex+220, y)
	return g.workflow(t, s)
}

// duplicateSwitch sends a trigger claim that found the same event finished or running (skip/succeeded,
// skip/in_progress) to its one output, and any other to the fallback.
func duplicateSwitch(slug string, pos [2]int) N8nNode {
	var conds []FilterCondition
	for _, w := range []string{"succeeded", "in_progress"} {
		conds = append(conds, FilterCondition{ID: stableID(slug, "Duplicate?", w), LeftValue: "={{ $json.reason }}", RightValue: w, Operator: FilterOperator{Type: "string", Operation: "equals"}})
	}
	p := SwitchParams{
		Rules: SwitchRules{Values: []SwitchRule{{
			Conditions:   FilterValue{Options: FilterOptions{CaseSensitive: true, TypeValidation: "strict", Version: 2}, Conditions: conds, Combinator: "or"},
			RenameOutput: true, OutputKey: "duplicate",
		}}},
		Options: SwitchOptions{FallbackOutput: "extra", RenameFallbackOutput: "not a duplicate"},
	}
	return N8nNode{Name: "Duplicate?", Type: n8nSwitch, Position: pos, Parameters: p}
}

// addAllItems adds All items, the Merge before the answer at x: ends feed its first inputs, and the
// incomplete output (1) of the delivery check its last, each its own input, so that every route of every
// item reaches the answer in one run (n8n's v1 order runs a Merge once all of its inputs' branches ran).
func (g *n8nGraph) addAllItems(ends []string, check string, x, y int) {
	g.add(N8nNode{Name: "All items", Type: n8nMerge, Position: [2]int{x, y}, Parameters: MergeParams{NumberInputs: len(ends) + 1},
		Notes: "Every item's end meets here, so the webhook is answered once, after every item was reported."})
	for i, from := range ends {
		g.connectInput(from, 0, "All items", i)
	}
	g.connectInput(check, 1, "All items", len(ends))
	g.connect("All items", 0, "Answer")
}
