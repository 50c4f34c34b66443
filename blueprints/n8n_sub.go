package blueprints

// The reusable n8n pieces (issue 12, item 2): two sub-workflows on the Execute Workflow Trigger,
// *companion: claim* and *companion: report*, so that any workflow guards a write with two Execute
// Workflow nodes around it, and an example workflow that does so. The claim runs before-write and returns
// the decision for a Switch; the report judges the write node's output with the templates' own Evidence
// code and runs after-write. Both take the calling workflow's values as declared workflow inputs, so the
// calling node shows a form, and both handle any number of items in one sub-execution (the calling node
// runs "once with all items": n8n 2.41 deprecates "once for each item").

import (
	"fmt"
	"sort"
	"strings"
)

// SubWorkflow is a template's part in the reusable pieces.
type SubWorkflow int

// The parts.
const (
	// NotSub: a template on its own.
	NotSub SubWorkflow = iota
	// SubClaim is the sub-workflow *companion: claim*: before-write, answered in a shape to route on.
	SubClaim
	// SubReport is the sub-workflow *companion: report*: the write's evidence, then after-write.
	SubReport
	// SubCaller is a workflow that guards its write with the two sub-workflows.
	SubCaller
)

// The n8n node types of the reusable pieces, as n8n 2.41.1 registers them (n8n-nodes-base 2.41.1,
// nodes/ExecuteWorkflow): the Execute Workflow node's newest version 1.4 and the trigger's 1.2.
const (
	n8nExecuteWorkflow        = "n8n-nodes-base.executeWorkflow"
	n8nExecuteWorkflowTrigger = "n8n-nodes-base.executeWorkflowTrigger"
)

// Names shared by the generator, its tests, the READMEs and the e2e runner.
const (
	// SubClaimName is the claim sub-workflow's name, which a builder picks in the calling node.
	SubClaimName = "companion: claim"
	// SubReportName is the report sub-workflow's name.
	SubReportName = "companion: report"
	// NodeSubTrigger is the sub-workflows' trigger (n8n's default name for it).
	NodeSubTrigger = "When Executed by Another Workflow"
	// NodeCallClaim and NodeCallReport are the caller's two Execute Workflow nodes.
	NodeCallClaim  = "companion: claim"
	NodeCallReport = "companion: report"
)

// SubInput is one declared input of a sub-workflow: its name, its n8n type, what the calling node maps
// into it in the example, and what it means (for the README).
type SubInput struct {
	Name, Type, Caller, Meaning string
}

// SubClaimInputs are the inputs of *companion: claim*: the fields of a before-write request (API.md), named
// as the templates' Settings node names them, plus companion's URL.
var SubClaimInputs = []SubInput{
	{"companion_url", "string", "={{ $json.companion_url }}", "companion's base URL as n8n reaches it (required)"},
	{"key", "string", "={{ $json.key }}", "names ONE business effect, the same on every re-run (required)"},
	{"payload", "object", "={{ $json.payload }}", "the effect's normalized parameters (required); another payload under the same key is a conflict"},
	{"destination", "string", "={{ $json.destination }}", "the destination's name in companion's configuration"},
	{"dedupe", "string", "={{ $json.dedupe }}", "`key`, `lookup` or `none` (empty: the destination's configured mode)"},
	{"reference", "string", "={{ $json.reference }}", "the business reference people and lookups use"},
	{"batch_id", "string", "={{ $json.batch_id }}", "names the calling execution (`n8n-<workflow>-exec-<execution>`)"},
	{"batch_index", "number", "={{ $itemIndex }}", "the item's position"},
	{"execution_id", "string", "={{ $execution.id }}", "the **calling** execution's id, so the error workflow finds its claims (inside the sub-workflow, `$execution.id` is the sub-execution's)"},
}

// SubReportInputs are the inputs of *companion: report*.
var SubReportInputs = []SubInput{
	{"claim", "object", "={{ $('" + NodeCallClaim + "').item.json }}", "the item *companion: claim* returned on its `proceed` route (key, claim, companion_url)"},
	{"write", "object", "={{ $json }}", "the write node's output item, from its success or its error output (told apart as n8n does: an error-output item is the write's input item, the claim, with `error` added, or `error` alone)"},
	{"external_id_fields", "string", "={{ $('Settings').item.json.external_id_fields }}", "where the write node puts the id of what it wrote, first found wins (empty: `" + ExternalIDFields + "`)"},
}

// ExecuteWorkflowParams configure an Execute Workflow node (typeVersion 1.4) calling a workflow of the same
// n8n by id, with the sub-workflow's declared inputs mapped.
type ExecuteWorkflowParams struct {
	Source         string                 `json:"source"`
	WorkflowID     ResourceLocator        `json:"workflowId"`
	WorkflowInputs ResourceMapper         `json:"workflowInputs"`
	Mode           string                 `json:"mode"`
	Options        ExecuteWorkflowOptions `json:"options"`
}

// ResourceLocator is n8n's resource locator value: here the workflow to call, picked from the list by
// name (value empty until the builder picks it, or the id `templates render` was given).
type ResourceLocator struct {
	RL               bool   `json:"__rl"`
	Value            string `json:"value"`
	Mode             string `json:"mode"`
	CachedResultName string `json:"cachedResultName,omitempty"`
}

// ResourceMapper is n8n's resource mapper value: the sub-workflow's inputs (schema) and what the node maps
// into each (value).
type ResourceMapper struct {
	MappingMode           string                `json:"mappingMode"`
	Value                 map[string]string     `json:"value"`
	MatchingColumns       []string              `json:"matchingColumns"`
	Schema                []ResourceMapperField `json:"schema"`
	AttemptToConvertTypes bool                  `json:"attemptToConvertTypes"`
	ConvertFieldsToString bool                  `json:"convertFieldsToString"`
}

// ResourceMapperField is one input in a resource mapper's schema, as n8n's loadSubWorkflowInputs lists it.
type ResourceMapperField struct {
	ID               string `json:"id"`
	DisplayName      string `json:"displayName"`
	Required         bool   `json:"required"`
	DefaultMatch     bool   `json:"defaultMatch"`
	Display          bool   `json:"display"`
	CanBeUsedToMatch bool   `json:"canBeUsedToMatch"`
	Type             string `json:"type"`
	Removed          bool   `json:"removed"`
}

// ExecuteWorkflowOptions: the caller waits for the sub-workflow and continues with what it returned.
type ExecuteWorkflowOptions struct {
	WaitForSubWorkflow bool `json:"waitForSubWorkflow"`
}

// ExecuteWorkflowTriggerParams configure the Execute Workflow Trigger (typeVersion 1.2) with declared
// inputs ("Define using fields below"): the calling node shows them as a form, and the trigger passes on
// only those fields.
type ExecuteWorkflowTriggerParams struct {
	InputSource    string          `json:"inputSource"`
	WorkflowInputs TriggerInputSet `json:"workflowInputs"`
}

// TriggerInputSet lists the declared inputs.
type TriggerInputSet struct {
	Values []TriggerInput `json:"values"`
}

// TriggerInput is one declared input: its name and type (string, number, boolean, array, object, any).
type TriggerInput struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

func subTrigger(inputs []SubInput) N8nNode {
	p := ExecuteWorkflowTriggerParams{InputSource: "workflowInputs"}
	for _, in := range inputs {
		p.WorkflowInputs.Values = append(p.WorkflowInputs.Values, TriggerInput{Name: in.Name, Type: in.Type})
	}
	return N8nNode{Name: NodeSubTrigger, Type: n8nExecuteWorkflowTrigger, Position: [2]int{0, 300}, Parameters: p}
}

// callSub is an Execute Workflow node calling the sub-workflow named name (id, when known) with inputs mapped.
func callSub(name, id string, inputs []SubInput, pos [2]int) N8nNode {
	m := ResourceMapper{MappingMode: "defineBelow", Value: map[string]string{}, MatchingColumns: []string{}}
	for _, in := range inputs {
		m.Value[in.Name] = in.Caller
		m.Schema = append(m.Schema, ResourceMapperField{ID: in.Name, DisplayName: in.Name, Display: true, CanBeUsedToMatch: true, Type: in.Type})
	}
	return N8nNode{
		Name: name, Type: n8nExecuteWorkflow, Position: pos,
		Parameters: ExecuteWorkflowParams{
			Source:         "database",
			WorkflowID:     ResourceLocator{RL: true, Value: id, Mode: "list", CachedResultName: name},
			WorkflowInputs: m,
			Mode:           "once",
			Options:        ExecuteWorkflowOptions{WaitForSubWorkflow: true},
		},
		Notes: "Calls the sub-workflow " + name + ": pick it in Workflow → From list after importing it (or `companion templates render --claim-workflow-id ID --report-workflow-id ID`).",
	}
}

// claimRequestJS checks the claim's inputs and builds the before-write request. A missing input is the
// calling node's mapping, so the error names the inputs and where to map them.
const claimRequestJS = `// companion: claim. The calling Execute Workflow node maps its values into this workflow's inputs;
// companion_url, key and payload are required, the rest is optional (empty: absent).
const missing = ['companion_url', 'key', 'payload'].filter((f) => $json[f] === null || $json[f] === undefined || String($json[f]).trim() === '');
if (missing.length) {
  throw new Error('companion: claim: the input' + (missing.length > 1 ? 's ' : ' ') + missing.join(', ') + (missing.length > 1 ? ' are' : ' is') + ' empty; map ' + (missing.length > 1 ? 'them' : 'it') + ' in the Execute Workflow node that calls companion: claim');
}
if (typeof $json.payload !== 'object' || Array.isArray($json.payload)) {
  throw new Error('companion: claim: the input payload must be an object (the effect\'s normalized parameters), got ' + JSON.stringify($json.payload).slice(0, 100));
}
const body = { key: String($json.key), payload: $json.payload };
for (const f of ['destination', 'dedupe', 'reference', 'batch_id', 'batch_index', 'execution_id']) {
  if ($json[f] !== null && $json[f] !== undefined && $json[f] !== '') body[f] = $json[f];
}
if (body.execution_id !== undefined) body.execution_id = String(body.execution_id);
const companionURL = String($json.companion_url).replace(/\/+$/, '');
return { json: { url: companionURL + '` + PathBeforeWrite + `', companion_url: companionURL, body } };`

// claimAnswerJS shapes before-write's answer for the caller's Switch: every field a route reads is there
// (null when the answer has none), with companion's URL for companion: report.
const claimAnswerJS = `// before-write's answer, for a Switch on decision (proceed / skip / conflict / reconcile) and reason.
// proceed carries claim and idempotency_key (the write's Idempotency-Key header); skip/succeeded the stored
// external_id and result; skip/in_progress and skip/retry_later a retry_after in seconds.
// Any other status is companion refusing the request, which claimed nothing: decision and reason are null,
// error carries companion's error word and message (a field out of its rules: 400 invalid_request) and
// http_status its status, for the caller to answer (the Switch's fallback output). A request that got no
// answer at all comes back the same way, with unanswered: true, error.code no_answer and http_status 503.
const request = $('Claim request').item.json;
const res = $json;
const empty = { decision: null, reason: null, state: null, claim: null, idempotency_key: null, external_id: null, result: null, retry_after: null, message: null, error: null, http_status: res.statusCode ?? null };
if (res.statusCode === 200 && res.body && typeof res.body === 'object' && !Array.isArray(res.body)) {
  return { json: Object.assign(empty, res.body, { companion_url: request.companion_url }) };
}
` + noAnswerJS + `
if (noAnswer) {
  return { json: Object.assign(empty, {
    key: request.body.key,
    refused: true,
    unanswered: true,
    http_status: 503,
    error: noAnswer,
    message: noAnswer.message + ' when asked to claim ' + request.body.key,
    companion_url: request.companion_url,
  }) };
}
const e = res.body && typeof res.body === 'object' && res.body.error && typeof res.body.error === 'object' ? res.body.error : {};
const error = { code: String(e.code || 'http_' + res.statusCode), message: String(e.message || 'companion answered HTTP ' + res.statusCode).slice(0, 500) };
if (Array.isArray(e.fields)) error.fields = e.fields;
const ra = Number(res.headers && res.headers['retry-after']);
return { json: Object.assign(empty, {
  key: request.body.key,
  refused: true,
  error,
  retry_after: ra > 0 ? ra : null,
  message: 'companion refused the claim of ' + request.body.key + ' (HTTP ' + res.statusCode + ' ' + error.code + '): ' + error.message,
  companion_url: request.companion_url,
}) };`

// reportClaimJS checks the claim the caller passed to companion: report.
const reportClaimJS = `// companion: report. The claim to report: the item companion: claim returned on its proceed route.
const c = $json.claim && typeof $json.claim === 'object' ? $json.claim : {};
if (c.decision !== undefined && c.decision !== 'proceed') {
  throw new Error('companion: report: the claim input is a ' + c.decision + '/' + c.reason + ' answer for ' + c.key + '; only a proceed claim is reported (route the write and companion: report after the Switch\'s proceed output)');
}
const missing = ['key', 'claim', 'companion_url'].filter((f) => !c[f]);
if (missing.length) {
  throw new Error('companion: report: the claim input lacks ' + missing.join(', ') + '; map claim to what companion: claim returned, e.g. {{ $(\'` + NodeCallClaim + `\').item.json }}');
}
return { json: { key: c.key, claim: c.claim, companion_url: c.companion_url, external_id_fields: $json.external_id_fields || '` + ExternalIDFields + `' } };`

// reportWriteJS marks an item of the write's error output as Evidence reads it (write_error), like the
// templates' "Write error" node; a success passes as it is. One calling node takes both outputs (through a
// Merge, so that every item is reported before the caller answers or stops), so the item itself says which
// output it came from, by n8n's own rule (workflow-execute.js, handleNodeErrorOutput): an error-output item is
// the write's input item (here the claim) with the error added, or, when n8n cannot pair it, only error,
// message and details.
const reportWriteJS = `// The write node's output as Evidence reads it. An item of its error output (On Error: Continue (using
// error output)) is marked write_error and judged from the error; a success output item is the write.
// n8n makes an error-output item from the write's input item (this claim) with the error added, or, when it
// cannot pair it, from error, message and details alone; any other item is a success.
const input = $('` + NodeSubTrigger + `').item.json;
const w = input.write && typeof input.write === 'object' ? input.write : {};
const failed = w.error !== undefined && w.error !== null &&
  (w.claim === $json.claim || Object.keys(w).every((k) => ['error', 'message', 'details'].includes(k)));
return { json: failed ? { write_error: w.error } : w };`

// writeOutcomeJS is the write's outcome after its report (the templates' Write outcome node, and what
// companion: report returns to its caller).
const writeOutcomeJS = `// The write's outcome as the ledger recorded it, with the evidence sent.
const evidence = $('Evidence').item.json;
return { json: {
  key: $json.key,
  decision: 'proceed',
  state: $json.state,
  reason: $json.reason,
  external_id: evidence.external_id ?? null,
  result: evidence.result ?? null,
  evidence,
} };`

// n8nSub renders the reusable pieces: a sub-workflow or the example calling them.
func n8nSub(t Template, s Settings) N8nWorkflow {
	switch t.Sub {
	case SubClaim:
		return n8nSubClaim(t, s)
	case SubReport:
		return n8nSubReport(t, s)
	default:
		return n8nSubCaller(t, s)
	}
}

// subWorkflow ends a sub-workflow: a failure inside it fails the calling node, whose workflow's error
// workflow runs (with the calling execution's id, which the claims carry), so it names none of its own.
func (g *n8nGraph) subWorkflow(t Template, s Settings) N8nWorkflow {
	wf := g.workflow(t, s)
	wf.Settings.ErrorWorkflow = ""
	return wf
}

func n8nSubClaim(t Template, s Settings) N8nWorkflow {
	g := newN8nGraph(t.Slug)
	y := 300
	g.add(subTrigger(SubClaimInputs))
	g.add(codeNode("Claim request", "runOnceForEachItem", claimRequestJS, [2]int{220, y}))
	g.connect(NodeSubTrigger, 0, "Claim request")
	bw := beforeWriteHTTP(s, NodeBeforeWrite, "={{ $json.url }}", "={{ JSON.stringify($json.body) }}", [2]int{440, y})
	// Never Error: every status goes on to Claim answer, which returns a refusal (a field out of companion's
	// rules is 400) with companion's words instead of failing the caller with n8n's 500. A request that got no
	// answer at all (companion unreachable) goes on too (beforeWriteHTTP: On Error → Continue, no Retry On
	// Fail, which would re-run the node for all items and ask again those already claimed): Claim answer
	// returns it refused and unanswered (http_status 503), for the caller to answer 503 with a Retry-After.
	bw.Notes = "POST /v1/before-write with Never Error and On Error = Continue: Claim answer returns every answer, a refusal and no answer at all too. Keep Retry On Fail OFF: it re-runs the node for all items, asking again those already claimed."
	g.add(bw)
	g.connect("Claim request", 0, NodeBeforeWrite)
	g.add(codeNode("Claim answer", "runOnceForEachItem", claimAnswerJS, [2]int{660, y}))
	g.connect(NodeBeforeWrite, 0, "Claim answer")
	g.add(sticky("About", subNote(SubClaimName, SubClaimInputs, "the before-write answer: `decision`, `reason`, `state`, `key`, `claim`, `idempotency_key`, `external_id`, `result`, `retry_after`, `message`, `companion_url` and `http_status`. Route it with a Switch on `decision`. A request companion refused (a field out of its rules: 400) returns `refused: true`, `decision: null` and companion's `error` (`code`, `message`, `fields`): nothing was claimed; answer it from the Switch's fallback output."), [2]int{160, y - 420}, 620, 380, 7))
	return g.subWorkflow(t, s)
}

func n8nSubReport(t Template, s Settings) N8nWorkflow {
	g := newN8nGraph(t.Slug)
	y := 300
	g.add(subTrigger(SubReportInputs))
	g.add(codeNode("Claim", "runOnceForEachItem", reportClaimJS, [2]int{220, y}))
	g.connect(NodeSubTrigger, 0, "Claim")
	g.add(codeNode("Write output", "runOnceForEachItem", reportWriteJS, [2]int{440, y}))
	g.connect("Claim", 0, "Write output")
	g.add(codeNode("Evidence", "runOnceForEachItem", evidenceJSFrom("Claim", "Claim"), [2]int{660, y}))
	g.connect("Write output", 0, "Evidence")
	g.add(reportHTTPAt(s, "After-write", "={{ $('Claim').item.json.companion_url }}", PathAfterWrite, "={{ JSON.stringify($json) }}", [2]int{880, y}))
	g.connect("Evidence", 0, "After-write")
	g.add(codeNode("Write outcome", "runOnceForEachItem", writeOutcomeJS, [2]int{1100, y}))
	g.connect("After-write", 0, "Write outcome")
	g.add(sticky("About", subNote(SubReportName, SubReportInputs, "the after-write answer with the evidence sent: `key`, `decision` (`proceed`), `state`, `reason`, `external_id`, `result`, `evidence`."), [2]int{160, y - 420}, 620, 380, 7))
	return g.subWorkflow(t, s)
}

// subNote is a sub-workflow's sticky note: what it is for, its inputs, what it returns.
func subNote(name string, inputs []SubInput, returns string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\nA sub-workflow: call it with an **Execute Workflow** node (Run once with all items, wait for completion). Keep its name and its inputs; publish it.\n\n**Inputs**\n", name)
	for _, in := range inputs {
		fmt.Fprintf(&b, "- `%s` (%s): %s\n", in.Name, in.Type, in.Meaning)
	}
	b.WriteString("\n**Returns** " + returns + "\n")
	return b.String()
}

// n8nSubCaller renders the example: the single-item guarded write of a webhook with its claim and report
// done by the two sub-workflows, answering the webhook as guarded-write does (200, 400, 409, 422, 503).
func n8nSubCaller(t Template, s Settings) N8nWorkflow {
	g := newN8nGraph(t.Slug)
	y := 300
	g.add(N8nNode{
		Name: "Webhook", Type: n8nWebhook, Position: [2]int{0, y}, WebhookID: stableID(t.Slug, "webhook"),
		Parameters: WebhookParams{HTTPMethod: "POST", Path: t.WebhookPath, ResponseMode: "responseNode"},
		Notes:      "Trigger. Example body: " + t.Example.Event + ". Answered by the Respond nodes at the end (200, 400, 409, 422, 503 + Retry-After).",
	})
	g.add(checkDeliveryNode(t, [2]int{220, y}))
	g.connect("Webhook", 0, NodeCheckDelivery)
	g.add(switchOn(t.Slug, "Delivery complete?", "delivery", []string{"complete", "incomplete"}, [2]int{440, y}))
	g.connect(NodeCheckDelivery, 0, "Delivery complete?")
	g.add(settingsNode(t, s, "$json.body", [2]int{660, y}))
	g.connect("Delivery complete?", 0, "Settings")
	g.add(callSub(NodeCallClaim, s.ClaimWorkflowID, SubClaimInputs, [2]int{880, y}))
	g.connect("Settings", 0, NodeCallClaim)
	g.add(decisionSwitch(t.Slug, "Decision", []string{"proceed", "skip", "conflict"}, [2]int{1100, y}))
	g.connect(NodeCallClaim, 0, "Decision")
	g.add(sticky("Slot note", slotNote(false), [2]int{1260, y - 420}, 520, 360, 5))
	g.add(N8nNode{
		Name: NodeWrite, Type: n8nHTTPRequest, Position: [2]int{1320, y},
		Parameters: HTTPParams{
			Method:      "POST",
			URL:         "={{ $('Settings').item.json.write_url }}",
			SendHeaders: true,
			HeaderParameters: &NameValueList{Parameters: []NameValue{
				{Name: "Idempotency-Key", Value: "={{ $json.idempotency_key }}"},
			}},
			SendBody: true, SpecifyBody: "json",
			JSONBody: "={{ JSON.stringify(Object.assign({}, $('Settings').item.json.payload, { reference: $('Settings').item.json.reference })) }}",
			Options:  HTTPOptions{Response: fullResponse(), Timeout: s.WriteTimeoutMillis},
		},
		OnError: "continueErrorOutput",
		Notes:   "THE SLOT: replace with any write node, keeping On Error = Continue (using error output) with BOTH outputs connected to Both outcomes, and Retry On Fail OFF. An HTTP Request also keeps the header Idempotency-Key = {{ $json.idempotency_key }}, Never Error + Include Response Headers and Status.",
	})
	g.connect("Decision", 0, NodeWrite)
	// Both outcomes in one input, so the report runs once for all items: connected to it directly, the two
	// outputs would each run it, and the first to reach the answer could stop the execution (a person is
	// needed) before the other's items were reported.
	g.add(N8nNode{Name: "Both outcomes", Type: n8nMerge, Position: [2]int{1540, y}, Parameters: MergeParams{}})
	g.connectInput(NodeWrite, 0, "Both outcomes", 0)
	g.connectInput(NodeWrite, 1, "Both outcomes", 1)
	g.add(callSub(NodeCallReport, s.ReportWorkflowID, SubReportInputs, [2]int{1760, y}))
	g.connect("Both outcomes", 0, NodeCallReport)
	g.add(codeNode("Stored result", "runOnceForEachItem", storedResultJS, [2]int{1760, y + 260}))
	g.connect("Decision", 1, "Stored result")
	g.add(codeNode("Surface", "runOnceForEachItem", surfaceJS, [2]int{1760, y + 440}))
	g.connect("Decision", 2, "Surface")
	// A claim companion refused (answered with its words), or an answer this example does not handle.
	g.add(codeNode("Other answer", "runOnceForEachItem", otherAnswerJS, [2]int{1760, y + 620}))
	g.connect("Decision", 3, "Other answer")
	g.addAllItems([]string{NodeCallReport, "Stored result", "Surface", "Other answer"}, "Delivery complete?", 2200, y)
	g.addAnswer(t.Slug, 2420, y)
	return g.workflow(t, s)
}

// checkDeliveryNode checks, before any key is built, that the delivery carries every field of the example.
func checkDeliveryNode(t Template, pos [2]int) N8nNode {
	var required []string
	for f := range t.Example.Fields {
		required = append(required, "'"+f+"'")
	}
	sort.Strings(required)
	return codeNode(NodeCheckDelivery, "runOnceForEachItem", strings.Replace(checkDeliveryJS, "REQUIRED", "["+strings.Join(required, ", ")+"]", 1), pos)
}

// subInputTable is a README table of a sub-workflow's inputs and what the example caller maps into each.
func subInputTable(inputs []SubInput) string {
	var b strings.Builder
	b.WriteString("| input | type | the example maps | meaning |\n| --- | --- | --- | --- |\n")
	for _, in := range inputs {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", in.Name, in.Type, strings.TrimPrefix(in.Caller, "="), in.Meaning)
	}
	return b.String()
}

// subWorkflowReadme is the n8n README's section on the reusable sub-workflows.
func subWorkflowReadme() string {
	return strings.NewReplacer("CLAIMNAME", SubClaimName, "REPORTNAME", SubReportName, "CLAIMINPUTS", subInputTable(SubClaimInputs), "REPORTINPUTS", subInputTable(SubReportInputs), "NODEWRITE", NodeWrite).Replace(`## Reusable sub-workflows

Instead of copying the guarded-write nodes into every workflow, import two sub-workflows once and guard any
write with two **Execute Workflow** nodes around it (` + "`guarded-write-subworkflows.json`" + ` is the example):

` + "```" + `
trigger → Settings → Execute Workflow "CLAIMNAME" → Switch on decision
  proceed  → YOUR WRITE (On Error: Continue (using error output)) ─┬─ success output ─┐
                                                                    └─ error output ───┴→ Merge "Both outcomes" → Execute Workflow "REPORTNAME" → …
  skip     → reason succeeded: the stored external_id and result; in_progress / retry_later: retry_after; others end here
  conflict → stop: a person decides
` + "```" + `

Import them **before** the workflow that calls them, since it calls them by id:

1. Import ` + "`companion-claim.json`" + ` and ` + "`companion-report.json`" + ` (Import from File, or ` + "`n8n import:workflow --input=<file>`" + `).
   Keep their names; their HTTP Request nodes use the **Bearer Auth** credential above. **Publish both**: from a
   production execution n8n 2.x runs the published version of a sub-workflow and refuses one that has none
   ("Workflow is not active and cannot be executed").
2. Import ` + "`guarded-write-subworkflows.json`" + `, open its node **CLAIMNAME** → Workflow → **From list** → *CLAIMNAME*,
   and its node **REPORTNAME** → *REPORTNAME*. The inputs are already mapped (tables below). Or write the ids in
   before importing: ` + "`companion templates render --url … --claim-workflow-id <id> --report-workflow-id <id> --out DIR`" + `
   (a workflow's id is the last part of its URL, ` + "`/workflow/<id>`" + `), then import the rendered caller.
3. Fill in **Settings**, replace **NODEWRITE** as described above (both of its outputs stay connected to
   **Both outcomes**, the Merge that feeds **REPORTNAME**: one report for all items, before any of them is
   answered; every route then meets in **All items**, so several items are answered once), set the error workflow
   on the caller, publish it.

n8n lets a sub-workflow be called by workflows of the same owner (its setting *This workflow can be called by*);
a caller in another project needs that setting changed on the two sub-workflows. The calling nodes run *once with
all items* (n8n 2.41 deprecates *once for each item*): any number of items, one claim each, answered in order. A
failure inside a sub-workflow (a key companion refuses, after-write still refused after 5 tries) fails the
calling node, so the caller's execution fails and **its** error workflow runs; the sub-workflows name none.

**CLAIMNAME** asks ` + "`POST /v1/before-write`" + ` for each item and returns the
answer to route on: ` + "`decision`, `reason`, `state`, `key`, `claim`, `idempotency_key`" + ` (the write's Idempotency-Key
header), ` + "`external_id`, `result`" + ` (with ` + "`skip`/`succeeded`" + `), ` + "`retry_after`" + ` (seconds, with ` + "`skip`/`in_progress`" + ` and
` + "`skip`/`retry_later`" + `), ` + "`message`" + `, ` + "`companion_url`" + `, ` + "`http_status`" + ` and ` + "`error`" + `; fields the answer lacks are ` + "`null`" + `. Missing
` + "`companion_url`, `key` or `payload`" + ` fail the call with an error naming them. The request runs with *Never Error*: a
request companion refuses (a field out of its rules is 400 ` + "`invalid_request`" + `; nothing is claimed) comes back as an item
with ` + "`refused: true`" + `, ` + "`decision: null`" + `, its ` + "`http_status`" + ` and ` + "`error: {code, message, fields}`" + ` (companion's words), which the
Switch's fallback output sends to **Other answer**, answered 400 (503 with a ` + "`Retry-After`" + ` when companion could not
record the claim, 500 for a credential or role it refused). Retry On Fail stays on for a request that got no answer at all
(companion unreachable: nothing was recorded, asking again is safe); a status companion answered is not asked again.

CLAIMINPUTS
` + "`execution_id`" + ` must be the calling execution's ` + "`{{ $execution.id }}`" + `: inside a sub-workflow ` + "`$execution.id`" + ` is the
sub-execution's, and the caller's error workflow lists the failed execution's items by it.

**REPORTNAME** judges the write node's output with the templates' own **Evidence** code (an HTTP status, a
transport code, an SMTP reply, else ` + "`unknown`" + `), reports it with ` + "`POST /v1/after-write`" + ` (Retry On Fail on) and returns
` + "`key`, `decision` (`proceed`), `state`, `reason`, `external_id`, `result`" + ` and the ` + "`evidence`" + ` it sent.

REPORTINPUTS`)
}
