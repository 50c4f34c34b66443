package blueprints

// The JavaScript of the batch template's Code nodes that answer its webhook: the delivery's check,
// each item's end (written, stored, not written) and the one answer for the whole delivery. Each is run
// in Node.js by batch_answers_test.go.

// batchCheckDeliveryJS checks, before any key is built, that the delivery is a list of items each
// carrying every field the key, reference and payload are made of. One bad item refuses the whole
// delivery, as API.md's batch call does ("any invalid item fails the whole request with 400 naming it,
// and nothing is written"). REQUIRED is replaced by the template's field list.
const batchCheckDeliveryJS = `// Before any key is built: the delivery must be a non-empty list of items, each carrying every field the
// key, the reference and the payload are made of. One malformed item refuses the whole delivery (400
// naming it, e.g. items[3].invoice; nothing is claimed), as a batch call to companion does: otherwise
// each malformed item would build a key like invoice-undefined:reminder:2 that they all share.
// YOUR TRIGGER: list the fields your Settings mapping reads.
const required = REQUIRED;
const items = $json.body && Array.isArray($json.body.items) ? $json.body.items : null;
const missing = [];
if (items === null || items.length === 0) {
  missing.push('items');
} else {
  items.forEach((it, i) => {
    if (it === null || typeof it !== 'object' || Array.isArray(it)) {
      missing.push('items[' + i + ']');
      return;
    }
    for (const f of required) {
      if (it[f] === undefined || it[f] === null || String(it[f]).trim() === '') missing.push('items[' + i + '].' + f);
    }
  });
}
// The answer names the first 100; missing_total counts them all.
return { json: Object.assign({}, $json, { delivery: missing.length ? 'incomplete' : 'complete', missing: missing.slice(0, 100), missing_total: missing.length }) };`

// batchWrittenJS joins each written item's evidence with what the batch after-write recorded (the
// calls answer in the order of the reports) and its position in the node.
const batchWrittenJS = `// Each written item as the ledger recorded it: the batch after-write calls answer in the order of the
// reports, which are the Evidence items in order. Only what a sender may see goes on (never the claim).
const proceeded = new Map($('One item per decision').all().map((d) => d.json).filter((d) => d.decision === 'proceed').map((d) => [d.key, d]));
const evidence = $('Evidence').all().map((it) => it.json);
const results = $input.all().flatMap((call) => (call.json && Array.isArray(call.json.items) ? call.json.items : []));
return evidence.map((ev, i) => {
  const r = results[i] || {};
  const d = proceeded.get(ev.key) || {};
  const out = {
    key: ev.key,
    batch_index: d.batch_index ?? null,
    decision: 'proceed',
    reason: r.reason ?? null,
    state: r.state ?? null,
    external_id: ev.external_id ?? null,
    evidence: { outcome: ev.outcome, http_status: ev.http_status ?? null, retry_after: ev.retry_after ?? null, error_class: ev.error ? ev.error.class : null },
  };
  // An item the after-write could not record (its claim was no longer this run's): reported inline.
  if (r.error) out.error = r.error.code || 'error';
  return { json: out };
});`

// batchNotWrittenJS ends an item that was not written (skip, conflict, or a decision the template does
// not handle) with what the answer needs.
const batchNotWrittenJS = `// Not written: skip (succeeded carries the stored external_id and result, as if the write had just
// happened; in progress, retry later, waiting for the owner end the item here), conflict, or a decision
// this template does not handle (reconcile), or a call companion refused (refused: nothing of it was claimed).
// The webhook's answer counts it; a conflict then stops the run.
if ($json.refused) {
  return { json: { key: $json.key, batch_index: $json.batch_index ?? null, refused: true, http_status: $json.http_status, error: $json.error, retry_after: $json.retry_after ?? null } };
}
return { json: {
  key: $json.key,
  batch_index: $json.batch_index ?? null,
  decision: $json.decision,
  reason: $json.reason,
  state: $json.state,
  external_id: $json.external_id ?? null,
  result: $json.result ?? null,
  retry_after: $json.retry_after ?? null,
} };`

// batchAnswerJS decides the one answer for a whole delivery. A sender redelivers the whole batch and
// the ledger skips what already exists, so the batch is answered by the item that most needs it.
const batchAnswerJS = `// What the webhook answers for the whole delivery. A sender redelivers all of it on a non-2xx answer, and
// the ledger skips every item already written, so the delivery is answered by its items, first match wins:
// 400 an item lacks fields (Check delivery: nothing was claimed), or companion refused a call (a field out of
//     its rules: 400 naming it, with companion's error word and message; nothing of that call was claimed);
// 409 an item got conflict: the same key with a different payload (a person decides);
// 503 + Retry-After: an item a later delivery can still finish (in progress, retry later, a write that failed
//     retryably or is unknown, waiting for its owner or a lookup); the soonest of their retry times;
// 422 items were refused for good (a 4xx, an SMTP 5xx, failed_permanent) and none can still finish;
// 200 every item's effect exists.
// The body lists every item (key, state, external id, its own answer) in the order of the delivery.
const all = $input.all().map((it) => it.json);
const nothingClaimed = all.length === 1 && all[0].delivery === 'incomplete';
if (nothingClaimed) {
  const d = all[0];
  const more = d.missing_total > d.missing.length ? ' and ' + (d.missing_total - d.missing.length) + ' more' : '';
  // execution_id finds the run in n8n's executions; no item of it was claimed.
  const body = { error: 'missing_fields', status: 400, message: 'the delivery lacks ' + d.missing.join(', ') + more + '; nothing was claimed', missing: d.missing, missing_total: d.missing_total, execution_id: String($execution.id) };
  return [{ json: { status: 400, retry_after: null, later: 'now', end: 'done', body } }];
}
` + refusedForGoodJS + `
const answerOf = (r) => {
  const ev = r.evidence || {};
  // A call companion refused: its own status for a refused content (400, 413), 503 when companion could not
  // record the claims (nothing was), else 500 (a credential or configuration a person must fix).
  if (r.refused) {
    if (r.http_status === 400 || r.http_status === 413) return { answer: r.http_status };
    if (r.http_status === 503) return { answer: 503, retry_after: Number(r.retry_after) > 0 ? Number(r.retry_after) : 60 };
    return { answer: 500 };
  }
  // A conflict first: its state is the stored one, often succeeded with the earlier payload.
  if (r.decision === 'conflict') return { answer: 409 };
  if (r.state === 'succeeded') return { answer: 200 };
  if (r.decision === 'skip' && r.reason === 'failed_permanent') return { answer: 422 };
  if (r.state === 'failed' && refusedForGood(ev)) return { answer: 422 };
  const ra = Number(r.retry_after ?? ev.retry_after);
  return { answer: 503, retry_after: ra > 0 ? ra : (r.decision === 'skip' && r.reason === 'in_progress' ? 30 : 60) };
};
// A key delivered twice is claimed once; the repeat (skip/in_progress) ends as its first occurrence did.
const proceeded = new Map(all.filter((r) => r.decision === 'proceed').map((r) => [r.key, r]));
const items = all.map((r) => {
  const first = r.decision === 'skip' && r.reason === 'in_progress' ? proceeded.get(r.key) : undefined;
  const a = answerOf(first || r);
  const item = { key: r.key, batch_index: r.batch_index ?? null, decision: r.decision, reason: r.reason ?? null, state: (first || r).state ?? null, external_id: (first || r).external_id ?? null, answer: a.answer };
  if (a.retry_after !== undefined) item.retry_after = a.retry_after;
  if (r.error) item.error = r.error;
  return item;
}).sort((a, b) => (a.batch_index ?? 0) - (b.batch_index ?? 0));
const answers = {};
for (const it of items) answers[it.answer] = (answers[it.answer] || 0) + 1;
const status = [400, 413, 409, 500, 503, 422].find((s) => answers[s]) ?? 200;
const retryAfter = status === 503 ? Math.min(...items.filter((it) => it.answer === 503).map((it) => it.retry_after)) : null;
// The batch calls' answers (full responses: a refused call has no counts).
const calls = $('Batch before-write').all().map((call) => (call.json.statusCode === 200 && call.json.body) || {});
const counts = {};
for (const call of calls) {
  for (const [decision, n] of Object.entries(call.counts || {})) counts[decision] = (counts[decision] || 0) + n;
}
const batchId = $('Batch request').first().json.batch_id ?? null;
const told = { 200: 'exist', 400: 'refused by companion', 413: 'refused by companion', 409: 'conflict', 500: 'refused by companion (needs a person)', 503: 'to deliver again later', 422: 'refused for good' };
const refusals = [...new Set(items.filter((it) => it.error && it.error.message).map((it) => it.error.code + ': ' + it.error.message))];
const parts = Object.keys(answers).map((s) => answers[s] + ' ' + told[s]);
const body = {
  status,
  batch_id: batchId,
  counts,
  answers,
  items,
  message: 'companion: batch ' + batchId + ', ' + items.length + ' items (' + parts.join(', ') + '), answered ' + status +
    (refusals.length ? '; companion refused: ' + refusals.slice(0, 3).join('; ') + '; nothing of a refused call was claimed or written' : ''),
};
if (answers[400] || answers[413]) body.error = (items.find((it) => it.error && it.error.code) || { error: {} }).error.code;
// Anything but every effect existing (or a delivery refused for its content, like one missing fields) fails
// the execution after answering, so it shows in n8n's failed executions and the error workflow runs.
const end = status === 200 || ((status === 400 || status === 413) && items.every((it) => it.answer === status)) ? 'done' : 'surface';
return [{ json: { status, retry_after: retryAfter === null ? null : String(retryAfter), later: status === 503 ? 'later' : 'now', end, body } }];`

// batchDoneJS continues the workflow with one item per delivered item.
const batchDoneJS = `// Continue your workflow from here: one item per delivered item, in order (key, state, external_id).
// A delivery refused before any key (400) has none.
return ($input.first().json.body.items || []).map((it) => ({ json: it }));`
