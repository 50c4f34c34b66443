package blueprints

import "strings"

// n8nBatch renders the batch template: the delivery checked before any key is built, one batch
// before-write for all items of a node, the proceeding items written one by one, one batch after-write
// with all evidence, and one answer to the webhook for the whole delivery.
func n8nBatch(t Template, s Settings) N8nWorkflow {
	g := newN8nGraph(t.Slug)
	y := 300
	g.add(N8nNode{
		Name: "Webhook", Type: n8nWebhook, Position: [2]int{0, y}, WebhookID: stableID(t.Slug, "webhook"),
		Parameters: WebhookParams{HTTPMethod: "POST", Path: t.WebhookPath, ResponseMode: "responseNode"},
		Notes: `Trigger. Example body: {"items": [` + t.Example.Event + `, …]}. Answered by the Respond nodes at the end, for the whole delivery (200, 400, 409, 422, 503 + Retry-After). ` +
			"Any trigger works (Schedule, a sheet, a queue): without a webhook, remove Check delivery and the Respond nodes.",
	})
	g.add(codeNode(NodeCheckDelivery, "runOnceForEachItem", strings.Replace(batchCheckDeliveryJS, "REQUIRED", requiredFieldsJS(t), 1), [2]int{220, y}))
	g.connect("Webhook", 0, NodeCheckDelivery)
	g.add(switchOn(t.Slug, "Delivery complete?", "delivery", []string{"complete", "incomplete"}, [2]int{440, y}))
	g.connect(NodeCheckDelivery, 0, "Delivery complete?")
	g.add(N8nNode{
		Name: "YOUR ITEMS: one item per write", Type: n8nSplitOut, Position: [2]int{660, y},
		Parameters: SplitOutParams{FieldToSplitOut: "body.items"},
		Notes:      "THE ITEMS SLOT: replace with whatever produces one n8n item per business effect (rows of a sheet, records of a query).",
	})
	g.connect("Delivery complete?", 0, "YOUR ITEMS: one item per write")
	g.connect("Delivery complete?", 1, "Answer")
	g.add(settingsNode(t, s, "$json", [2]int{880, y}))
	g.connect("YOUR ITEMS: one item per write", 0, "Settings")
	g.add(codeNode("Batch request", "runOnceForAllItems", `// All items of the node, in order, 500 to a POST /v1/batches/before-write (the most one call takes):
// each keeps its own key and its position in the node as batch_index.
const all = $input.all();
const calls = [];
for (let start = 0; start < all.length; start += 500) {
  const items = all.slice(start, start + 500).map((it, i) => ({
    key: it.json.key,
    payload: it.json.payload,
    destination: it.json.destination,
    dedupe: it.json.dedupe,
    reference: it.json.reference,
    batch_index: start + i,
    execution_id: $execution.id,
  }));
  calls.push({ json: { batch_id: all[0].json.batch_id, items } });
}
return calls;`, [2]int{1100, y}))
	g.connect("Settings", 0, "Batch request")
	bbw := beforeWriteHTTP(s, "Batch before-write", "={{ $('Settings').first().json.companion_url }}"+PathBatchBeforeWrite, "={{ JSON.stringify($json) }}", [2]int{1320, y})
	bbw.Notes = "POST /v1/batches/before-write with Never Error and On Error = Continue: every answer goes on, so a call companion refuses (400 naming the item) is answered with companion's words, not n8n's 500, and a call that got no answer with 503. Keep Retry On Fail OFF."
	g.add(bbw)
	g.connect("Batch request", 0, "Batch before-write")
	g.add(codeNode("One item per decision", "runOnceForAllItems", `// One n8n item per decision, in the order of the node's items (the calls answer in order), with what the
// write needs. A call companion refused (any invalid item refuses the whole call: 400 naming it, nothing
// written) gives each of its items marked refused, with companion's error word and message; a call that got
// no answer at all (On Error → Continue, no Retry On Fail) gives each of its items marked unanswered (503).
const settings = $('Settings').all();
const requests = $('Batch request').all();
return $input.all().flatMap((call, c) => {
  const res = call.json;
  if (res.statusCode === 200 && res.body && Array.isArray(res.body.items)) return res.body.items;
  const sent = requests[c].json.items;
`+noAnswerJS+`
  if (noAnswer) return sent.map((it) => ({ key: it.key, batch_index: it.batch_index, refused: true, unanswered: true, http_status: 503, error: noAnswer, retry_after: null }));
  const e = res.body && typeof res.body === 'object' && res.body.error && typeof res.body.error === 'object' ? res.body.error : {};
  const ra = Number(res.headers && res.headers['retry-after']);
  // Positions in companion's message are the call's (items[3]); the call's first item is the node's item c * 500.
  const where = requests.length > 1 ? 'call ' + (c + 1) + ' of ' + requests.length + ' (items ' + sent[0].batch_index + '-' + sent[sent.length - 1].batch_index + '): ' : '';
  const error = { code: String(e.code || 'http_' + res.statusCode), message: where + String(e.message || 'companion answered HTTP ' + res.statusCode).slice(0, 500) };
  if (Array.isArray(e.fields)) error.fields = e.fields;
  return sent.map((it) => ({ key: it.key, batch_index: it.batch_index, refused: true, http_status: res.statusCode, error, retry_after: ra > 0 ? ra : null }));
}).map((d, i) => ({
  json: Object.assign({}, d, {
    write_url: settings[i].json.write_url,
    payload: settings[i].json.payload,
    reference: settings[i].json.reference,
    companion_url: settings[i].json.companion_url,
  }),
}));`, [2]int{1540, y}))
	g.connect("Batch before-write", 0, "One item per decision")
	g.add(decisionSwitch(t.Slug, "Decision", []string{"proceed", "skip", "conflict"}, [2]int{1760, y}))
	g.connect("One item per decision", 0, "Decision")
	g.add(sticky("Slot note", slotNote(true), [2]int{1920, y - 440}, 520, 380, 5))
	_, last := g.guardedWriteTail(s, "One item per decision", true, 1980, y)
	g.connect("Decision", 0, NodeWrite)
	g.add(codeNode("Batch report", "runOnceForAllItems", `// All evidence, 500 reports to a POST /v1/batches/after-write.
const all = $input.all().map((it) => it.json);
const calls = [];
for (let start = 0; start < all.length; start += 500) {
  calls.push({ json: { items: all.slice(start, start + 500) } });
}
return calls;`, [2]int{2860, y}))
	g.connect(last, 0, "Batch report")
	n := reportHTTP(s, "Batch after-write", PathBatchAfterWrite, "={{ JSON.stringify($json) }}", [2]int{3080, y})
	n.Parameters = func() HTTPParams {
		p := n.Parameters.(HTTPParams)
		p.URL = "={{ $('Settings').first().json.companion_url }}" + PathBatchAfterWrite
		return p
	}()
	g.add(n)
	g.connect("Batch report", 0, "Batch after-write")
	g.add(codeNode("Written", "runOnceForAllItems", batchWrittenJS, [2]int{3300, y}))
	g.connect("Batch after-write", 0, "Written")
	g.add(codeNode("Stored result", "runOnceForEachItem", batchNotWrittenJS, [2]int{1980, y + 300}))
	g.connect("Decision", 1, "Stored result")
	g.add(codeNode("Surface", "runOnceForEachItem", batchNotWrittenJS, [2]int{1980, y + 480}))
	g.connect("Decision", 2, "Surface")
	// A call companion refused, or a decision this template does not handle (reconcile): its own input of
	// All items, so that the items of every route meet in one run of the answer.
	g.add(codeNode("Other answer", "runOnceForEachItem", batchNotWrittenJS, [2]int{1980, y + 660}))
	g.connect("Decision", 3, "Other answer")
	// Every item's end meets in one place, so the delivery gets one answer. In n8n's v1 order the
	// branches run top to bottom and the merge waits for every branch that has items, so the answer
	// comes after the written items were reported, and a conflict stops the run only after answering.
	g.add(N8nNode{Name: "All items", Type: n8nMerge, Position: [2]int{3520, y + 200}, Parameters: MergeParams{NumberInputs: 4},
		Notes: "Written, stored and not written items meet here, so the webhook answers once for the whole delivery."})
	g.connectInput("Written", 0, "All items", 0)
	g.connectInput("Stored result", 0, "All items", 1)
	g.connectInput("Surface", 0, "All items", 2)
	g.connectInput("Other answer", 0, "All items", 3)
	g.connect("All items", 0, "Answer")
	g.addAnswerWith(t.Slug, codeNode("Answer", "runOnceForAllItems", batchAnswerJS, [2]int{3740, y}),
		codeNode("Done", "runOnceForAllItems", batchDoneJS, [2]int{4620, y - 100}))
	return g.workflow(t, s)
}

// n8nErrorWorkflow renders the error workflow: when an execution of a guarded-write workflow
// fails, the claims it still held are reported as unknown at once.
func n8nErrorWorkflow(t Template, s Settings) N8nWorkflow {
	g := newN8nGraph(t.Slug)
	y := 300
	g.add(N8nNode{Name: "Error Trigger", Type: n8nErrorTrigger, Position: [2]int{0, y}, Parameters: EmptyParams{}})
	as := []SetAssignment{
		{ID: stableID(t.Slug, "companion_url"), Name: "companion_url", Value: s.ServiceURL, Type: "string"},
		{ID: stableID(t.Slug, "execution_id"), Name: "execution_id", Value: "={{ String($json.execution.id) }}", Type: "string"},
		{ID: stableID(t.Slug, "failure"), Name: "failure", Value: "={{ 'n8n execution ' + $json.execution.id + ' of ' + $json.workflow.name + ' failed at ' + $json.execution.lastNodeExecuted + ': ' + ($json.execution.error ? $json.execution.error.message : '') }}", Type: "string"},
	}
	g.add(N8nNode{Name: "Settings", Type: n8nSet, Position: [2]int{220, y},
		Parameters: SetParams{Mode: "manual", Assignments: SetAssignments{Assignments: as}},
		Notes:      "FILL IN companion_url. The guarded-write templates send $execution.id as every claim's execution_id; this workflow lists the failed execution's items by it."})
	g.connect("Error Trigger", 0, "Settings")
	get := companionHTTP(s, "Claims of the execution", "GET", "={{ $json.companion_url }}"+PathList, "", [2]int{440, y})
	p := get.Parameters.(HTTPParams)
	p.SendQuery = true
	p.QueryParameters = &NameValueList{Parameters: []NameValue{
		{Name: "execution_id", Value: "={{ $json.execution_id }}"},
		{Name: "limit", Value: "500"},
	}}
	p.Options.Response = fullResponse()
	// 500 items a page; 40 pages are the 20,000 items of 40 full batch calls.
	p.Options.Pagination = cursorPages(40)
	get.Parameters = p
	get.Notes = "The items whose latest claim this execution made: one output item per page of 500. A workflow token may list them (execution_id alone, with limit and cursor); the next node keeps those still in flight."
	g.add(get)
	g.connect("Settings", 0, "Claims of the execution")
	g.add(codeNode("Unknown reports", "runOnceForAllItems", `// Report each claim this execution still holds as unknown: the write may or may not have gone out,
// and the next run can then reconcile or retry with the same key at once instead of waiting for the
// lease to expire. The list holds the items whose latest claim came from this execution (also items an
// earlier run registered); an item claimed again since by another execution is not in it.
const settings = $('Settings').first().json;
const out = [];
for (const page of $input.all()) {
  const res = page.json;
  if (res.statusCode !== 200 || !res.body || !Array.isArray(res.body.items)) {
    // Fail loudly: the claims would stay in flight (a 403: a companion older than this template refuses the list
    // to a workflow token; a 401: the credential holds no token of that companion).
    throw new Error('GET /v1/items?execution_id=' + settings.execution_id + ' answered ' + res.statusCode + ': ' + JSON.stringify(res.body).slice(0, 200));
  }
  for (const item of res.body.items) {
    if (item.state !== 'in_flight' || !item.claim) continue;
    if (String(item.execution_id) !== settings.execution_id) continue;
    out.push({ json: { key: item.key, claim: item.claim, outcome: 'unknown', error: { class: 'other', code: 'n8n_execution_failed', message: settings.failure.slice(0, 300) } } });
  }
}
return out;`, [2]int{660, y}))
	g.connect("Claims of the execution", 0, "Unknown reports")
	g.add(reportHTTPAt(s, "Report unknown", "={{ $('Settings').first().json.companion_url }}", PathAfterWrite, "={{ JSON.stringify($json) }}", [2]int{880, y}))
	g.connect("Unknown reports", 0, "Report unknown")
	return g.workflow(t, s)
}

// RenderN8n renders one template as an n8n workflow.
func RenderN8n(t Template, s Settings) N8nWorkflow {
	switch {
	case t.ErrorWorkflow:
		return n8nErrorWorkflow(t, s)
	case t.Sub != NotSub:
		return n8nSub(t, s)
	case t.Shape == Batch:
		return n8nBatch(t, s)
	default:
		return n8nSingle(t, s)
	}
}
