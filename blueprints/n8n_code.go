package blueprints

// The JavaScript of the n8n templates' Code nodes: what the write returned as evidence, the answers, the
// trigger's report. Each is run in Node.js by evidence_test.go.

import (
	"fmt"
	"sort"
	"strings"
)

// transportClassesJS renders TransportErrors as a JS object literal, sorted for stability.
func transportClassesJS() string {
	var parts []string
	for _, e := range TransportErrors {
		parts = append(parts, fmt.Sprintf("%s: '%s'", e.Code, e.Class))
	}
	sort.Strings(parts)
	return "{ " + strings.Join(parts, ", ") + " }"
}

// smtpClassesJS renders SMTPReplies as a JS object literal keyed by the reply code's first digit.
func smtpClassesJS() string {
	var parts []string
	for _, r := range SMTPReplies {
		parts = append(parts, fmt.Sprintf("%s: '%s'", r.Digit, r.Class))
	}
	return "{ " + strings.Join(parts, ", ") + " }"
}

func preDispatchClassesJS() string {
	seen := map[string]bool{}
	var out []string
	for _, e := range TransportErrors {
		if !e.Dispatched && !seen[e.Class] {
			seen[e.Class] = true
			out = append(out, "'"+e.Class+"'")
		}
	}
	sort.Strings(out)
	return "[" + strings.Join(out, ", ") + "]"
}

// evidenceJS turns what the write returned into an after-write body (API.md). claimNode names the
// node whose item carries the claim (key, claim). It serves any write node run with On Error →
// Continue (using error output): an HTTP Request node's full response is judged by its status; any
// other node's success output is the effect itself; an error is judged from what the node says about it.
func evidenceJS(claimNode string) string { return evidenceJSFrom(claimNode, "Settings") }

// evidenceJSFrom is evidenceJS reading Settings → external_id_fields from settingsNode (the report
// sub-workflow has no Settings node).
func evidenceJSFrom(claimNode, settingsNode string) string {
	return strings.NewReplacer("CLAIM_NODE", claimNode, "SETTINGS_NODE", settingsNode, "TRANSPORT", transportClassesJS(), "PRE_DISPATCH", preDispatchClassesJS(), "SMTP_CLASSES", smtpClassesJS()).Replace(`// What came back from the write, as evidence for POST /v1/after-write. The write node runs with
// On Error → Continue (using error output), so every item it returns arrives here:
// - an HTTP Request node (Never Error, Include Response Headers and Status) gives {statusCode, headers,
//   body}: it is judged by the status;
// - any other node (Send Email, Gmail, Sheets, Slack, …) that returns an item on its success output has
//   written: succeeded, with the external id read from the first of Settings → external_id_fields found;
// - its error output arrives through "Write error" as write_error and is judged from the error: an HTTP
//   status where the node gives one, a transport code, an SMTP reply code (4xx for now, 5xx for good);
//   anything else is unknown.
const claim = $('CLAIM_NODE').item.json;
const report = { key: claim.key, claim: claim.claim };
const clip = (s) => String(s ?? '').slice(0, 300);
const retryAfter = (ra) => {
  if (ra === undefined || ra === null) return undefined;
  const secs = /^\d+$/.test(String(ra)) ? Number(ra) : Math.ceil((Date.parse(ra) - Date.now()) / 1000);
  return Number.isFinite(secs) && secs > 0 ? secs : undefined;
};
const byStatus = (status, headers, body) => {
  report.http_status = status;
  if (status >= 200 && status < 300) {
    report.outcome = 'succeeded';
    return;
  }
  if (status < 400 || status > 599) {
    report.outcome = 'unknown'; // a redirect or an odd status proves nothing
    return;
  }
  report.outcome = 'failed';
  report.error = { class: 'http', code: String(status), message: clip(typeof body === 'string' ? body : JSON.stringify(body ?? null)) };
  const secs = retryAfter(headers && headers['retry-after']);
  if (secs !== undefined) report.retry_after = secs;
};
const externalId = (out) => {
  // YOUR DESTINATION: Settings → external_id_fields lists where the node puts the id of what it wrote.
  const fields = String($('SETTINGS_NODE').first().json.external_id_fields || 'id').split(',').map((f) => f.trim()).filter(Boolean);
  for (const f of fields) {
    const v = f.split('.').reduce((o, k) => (o != null && typeof o === 'object' ? o[k] : undefined), out);
    if (v !== undefined && v !== null && v !== '') return String(v);
  }
  return null;
};
if ($json.write_error === undefined) {
  const out = $json;
  if (typeof out.statusCode === 'number' && out.headers && typeof out.headers === 'object') {
    byStatus(out.statusCode, out.headers, out.body);
    if (out.headers['x-request-id']) report.receiver_request_id = String(out.headers['x-request-id']);
    if (report.outcome === 'succeeded' && out.body && typeof out.body === 'object' && !Array.isArray(out.body)) report.result = out.body;
  } else {
    report.outcome = 'succeeded';
  }
  if (report.outcome === 'succeeded') report.external_id = externalId(out);
} else {
  const err = $json.write_error;
  const e = err && typeof err === 'object' ? err : {};
  const message = clip(typeof err === 'string' ? err : (e.message || e.description || JSON.stringify(err)));
  const status = Number(e.httpCode || e.statusCode || e.status || (/^(\d{3}) - /.exec(message) || [])[1]);
  const classes = TRANSPORT;
  const code = String(e.code || (e.cause && e.cause.code) || (message.match(/\b[A-Z][A-Z_]{3,}\b/g) || []).find((c) => classes[c]) || '');
  // An SMTP reply (nodemailer puts it after a colon: "Message failed: 451 4.3.0 try later").
  const smtp = /: ([45])(\d\d)[ -]/.exec(message);
  if (status >= 100 && status <= 599) {
    byStatus(status, e.headers || {}, message);
  } else if (classes[code]) {
    // Refused and DNS failures happen before anything is sent; everything else may have been committed.
    report.outcome = PRE_DISPATCH.includes(classes[code]) ? 'failed' : 'unknown';
    report.error = { class: classes[code], code, message };
  } else if (smtp) {
    // The mail server answered and refused the message: it holds none, so nothing was committed. A 4xx
    // (421, 451: try later) is connection_refused, retried after a backoff; a 5xx (550: never) is rejected,
    // failed for good and never retried automatically.
    report.outcome = 'failed';
    report.error = { class: SMTP_CLASSES[smtp[1]], code: 'smtp_' + smtp[1] + smtp[2], message };
  } else {
    report.outcome = 'unknown';
    report.error = { class: 'other', code, message };
  }
}
return { json: report };`)
}

const storedResultJS = `// skip: nothing is written. With reason "succeeded" the stored external_id and result
// go downstream as if the write had just happened; other reasons end the item here.
return { json: {
  key: $json.key,
  decision: $json.decision,
  reason: $json.reason,
  state: $json.state,
  external_id: $json.external_id ?? null,
  result: $json.result ?? null,
  retry_after: $json.retry_after ?? null,
} };`

const surfaceJS = `// conflict (or an answer this template does not handle): nothing is written.
// The run stops with an error after recording, so a person sees it.
` + surfaceReturnJS

// surfaceReturnJS returns the item to record and surface: companion's answer, and what a person reads.
const surfaceReturnJS = `return { json: {
  key: $json.key,
  decision: $json.decision,
  reason: $json.reason,
  state: $json.state,
  surface: true,
  message: 'companion answered ' + $json.decision + '/' + $json.reason + ' for ' + $json.key + ': ' + ($json.message || ''),
} };`

// runOutcomeJS reports the trigger claim from the write's outcome: succeeded when the write is
// known to exist; the write's own evidence when this run wrote (so a re-sent trigger is allowed
// exactly when the write may be retried); "validation" (nothing sent by this run) otherwise. A run
// that did not hold the trigger claim (it went on to the write's own before-write) reports nothing.
const runOutcomeJS = `// The trigger event's claim is reported like the write it guarded:
// - the write exists (succeeded now or before): succeeded, so a duplicate delivery is short-circuited;
// - this run wrote and the outcome is failed or unknown: the same evidence, so a re-sent trigger runs again
//   exactly when the write may be retried (after Retry-After; with the same key after an unknown);
// - this run sent nothing: failed/validation, so a later delivery may ask again.
// A run that did not claim the trigger (its claim was spent or refused, and the write's own before-write
// decided) has nothing to report.
const trigger = $('Trigger claim answer').item.json;
const w = $json;
if (trigger.decision !== 'proceed') return { json: { trigger: 'not_claimed', write: w } };
const report = { key: trigger.key, claim: trigger.claim };
if (w.state === 'succeeded') {
  report.outcome = 'succeeded';
  report.external_id = w.external_id ?? null;
  report.result = { write_key: w.key, write_state: w.state };
} else if (w.evidence) {
  for (const f of ['outcome', 'http_status', 'error', 'retry_after']) if (w.evidence[f] !== undefined) report[f] = w.evidence[f];
} else {
  const why = w.unanswered ? 'before-write got no answer' : w.refused ? 'before-write refused: ' + w.error.code : w.decision + '/' + w.reason;
  report.outcome = 'failed';
  report.error = { class: 'validation', code: w.refused ? w.error.code : why, message: 'this run sent nothing: ' + why };
}
return { json: { trigger: 'claimed', report, write: w } };`

// checkDeliveryJS checks, before any key is built, that the delivery carries every field the key,
// reference and payload are made of.
const checkDeliveryJS = `// Before any key is built: the delivery must carry every field the key, the reference and the payload
// are made of. A missing one would build a key like invoice-undefined:reminder:2 that every malformed
// delivery shares. YOUR TRIGGER: list the fields your Settings mapping reads.
const required = REQUIRED;
const body = $json.body && typeof $json.body === 'object' ? $json.body : {};
const missing = required.filter((f) => body[f] === undefined || body[f] === null || String(body[f]).trim() === '');
return { json: Object.assign({}, $json, { delivery: missing.length ? 'incomplete' : 'complete', missing }) };`

// noAnswerJS sets noAnswer to the error of a before-write that got no answer at all (connection refused or
// reset, a timeout), else to null. The request runs with On Error → Continue (regular output) and no Retry On
// Fail: n8n sends a node's items' requests together and retries a failing node as a whole, so a retry would
// ask again the items already claimed, which would meet their own claims (skip/in_progress), never be written
// and expire into unknown. Instead the item that got no answer goes on alone, as {error} in place of a
// response, and is answered 503 with a Retry-After: whether companion recorded it or not, a redelivery asks
// again; the other items go on with their own answers.
const noAnswerJS = `// No answer at all (companion unreachable, the connection reset, a timeout): n8n gives this item the
// request's error instead of a response (On Error → Continue; no Retry On Fail, which would re-run the
// node for every item, asking again the items already claimed). It is answered 503 with a Retry-After, so
// the sender delivers it again; the other items go on with their own answers.
let noAnswer = null;
if (typeof res.statusCode !== 'number') {
  const err = res.error && typeof res.error === 'object' ? res.error : { message: String(res.error ?? 'no response') };
  const text = String(err.message || err.description || 'no response');
  const code = String(err.code || (err.cause && err.cause.code) || (text.match(/\b(E[A-Z]{4,})\b/) || [])[1] || '');
  noAnswer = { code: 'no_answer', message: ('companion gave no answer' + (code ? ' (' + code + ')' : '') + ': ' + text).slice(0, 500) };
}`

// beforeWriteAnswerJS turns before-write's full response into the item the templates route on. The request
// runs with Never Error, so every status arrives here: a 200 is the decision itself; any other status is
// companion refusing the request (API.md: nothing is written when a request is refused), which becomes an
// item marked refused with companion's error word and message, so the webhook answers it (400 for a field out
// of companion's rules) instead of failing with n8n's own 500. A request that got no answer at all is marked
// refused and unanswered (noAnswerJS): answered 503, delivered again. KEY is the expression of the key asked
// about.
func beforeWriteAnswerJS(key string) string {
	return strings.ReplaceAll(`// before-write's answer. The request runs with Never Error (Include Response Headers and Status), so every
// status arrives here: a 200 is the decision to route on; anything else means companion refused the request
// and claimed nothing (a field out of its rules is 400 invalid_request). The refusal goes on with
// companion's error word and message, so the webhook answers it instead of n8n's own 500.
const res = $json;
if (res.statusCode === 200 && res.body && typeof res.body === 'object' && !Array.isArray(res.body)) return { json: res.body };
`+noAnswerJS+`
if (noAnswer) return { json: { key: KEY, refused: true, unanswered: true, http_status: 503, error: noAnswer, retry_after: null } };
const e = res.body && typeof res.body === 'object' && res.body.error && typeof res.body.error === 'object' ? res.body.error : {};
const ra = Number(res.headers && res.headers['retry-after']);
const error = { code: String(e.code || 'http_' + res.statusCode), message: String(e.message || 'companion answered HTTP ' + res.statusCode).slice(0, 500) };
if (Array.isArray(e.fields)) error.fields = e.fields;
return { json: { key: KEY, refused: true, http_status: res.statusCode, error, retry_after: ra > 0 ? ra : null } };`, "KEY", key)
}

// otherAnswerJS ends an item whose claim answer is not one of the routed decisions: a request companion
// refused (passed on to be answered with companion's words), or an answer the template does not handle
// (surfaced like a conflict).
const otherAnswerJS = `// Not one of the routed decisions. A request companion refused (refused: nothing was claimed) goes on to be
// answered with companion's error word and message; any other answer this template does not handle is
// recorded, then the run stops with an error so a person sees it.
if ($json.refused) {
  return { json: { key: $json.key, refused: true, unanswered: $json.unanswered === true, http_status: $json.http_status, error: $json.error, retry_after: $json.retry_after ?? null } };
}
` + surfaceReturnJS

// answerJS decides what the webhook answers, so that a sender (Stripe, Shopify, a form tool) that
// redelivers on any non-2xx answer redelivers exactly when a later delivery can still make the effect exist.
// It runs once for all items: every item's end meets in All items first, so a run that a builder feeds
// several items (one per event) is answered once, after every item was reported.
const answerJS = `// What the webhook answers. Senders redeliver on a non-2xx answer, so, for each item:
// 200 the effect exists (written now or before; a duplicate of a finished delivery);
// 400 the delivery lacks fields, or companion refused the claim (a field out of its rules): nothing was
//     claimed and a redelivery of the same body cannot help;
// 409 conflict: the same key arrived with a different payload (a person decides);
// 422 the destination refused the write for good (a 4xx, an SMTP 5xx): the same content would be refused again;
// 503 + Retry-After: anything a later delivery can still finish: in progress, retry later, a write that
//     failed retryably or is unknown, an item waiting for its owner, companion unable to record the claim.
// One item is answered as it is. Several items (your trigger gave several, e.g. after a Split Out) are answered
// once for all of them, first match wins: 400, 409, 500, 503 (the soonest Retry-After), 422, 200; the body
// lists each item's own answer.
const itemOf = (j) => j; // an item's end as this template gives it
` + refusedForGoodJS + `
const one = (r) => {
  const ev = r.evidence || {};
  let status = 503;
  let retryAfter = r.retry_after ?? ev.retry_after ?? null;
  if (r.delivery === 'incomplete') status = 400;
  else if (r.refused) status = r.http_status === 400 || r.http_status === 413 ? r.http_status : r.http_status === 503 ? 503 : 500;
  else if (r.decision === 'conflict') status = 409; // its state is the stored one, often succeeded
  else if (r.state === 'succeeded') status = 200;
  else if (r.surface) status = 500;
  else if (r.decision === 'skip' && r.reason === 'failed_permanent') status = 422;
  else if (r.state === 'failed' && refusedForGood(ev)) status = 422;
  if (status !== 503) retryAfter = null;
  else if (!(Number(retryAfter) > 0)) retryAfter = r.decision === 'skip' && r.reason === 'in_progress' ? 30 : 60;
  let body;
  if (r.delivery === 'incomplete') body = { error: 'missing_fields', message: 'the delivery lacks ' + r.missing.join(', '), missing: r.missing };
  else if (r.refused) {
    // companion's own error word and message (never internals: companion's messages carry none).
    body = { key: r.key, status, error: r.error.code, message: r.unanswered
      ? r.error.message + ' when asked to claim ' + r.key + '; nothing was written: deliver it again'
      : 'companion refused the claim of ' + r.key + ': ' + r.error.message + '; nothing was claimed or written' };
    if (r.error.fields) body.fields = r.error.fields;
  } else body = Object.assign({}, r, { status });
  // The sender sees the evidence, never the claim (a claim lets a caller report the write's outcome).
  if (body.evidence && body.evidence.claim !== undefined) {
    body.evidence = Object.assign({}, body.evidence);
    delete body.evidence.claim;
  }
  // A run that ends in anything but its effect (or a harmless duplicate, or a request refused for its content)
  // fails the execution after answering, so it shows in n8n's failed executions and the error workflow runs.
  const end = status === 200 || status === 400 || status === 413 || r.duplicate ? 'done' : 'surface';
  if (!body.message) body.message = 'companion: ' + (r.key || '') + ' ended ' + (r.decision || '') + '/' + (r.reason || r.state || '') + ', answered ' + status;
  return { status, retry_after: retryAfter === null ? null : Number(retryAfter), end, body };
};
const answers = $input.all().map((it) => one(itemOf(it.json)));
let a = answers[0];
if (answers.length > 1) {
  const counts = {};
  for (const x of answers) counts[x.status] = (counts[x.status] || 0) + 1;
  const status = [400, 413, 409, 500, 503, 422, 200].find((s) => counts[s]) ?? 500;
  const later = answers.filter((x) => x.status === 503);
  const people = answers.filter((x) => x.end === 'surface').map((x) => x.body.message);
  a = {
    status,
    retry_after: status === 503 ? Math.min(...later.map((x) => x.retry_after)) : null,
    end: people.length ? 'surface' : 'done',
    body: {
      status,
      answers: counts,
      items: answers.map((x) => x.body),
      message: 'companion: ' + answers.length + ' items (' + Object.keys(counts).map((s) => counts[s] + ' answered ' + s).join(', ') + '), answered ' + status +
        (people.length ? '; ' + people.slice(0, 5).join('; ') + (people.length > 5 ? '; and ' + (people.length - 5) + ' more' : '') : ''),
    },
  };
}
return [{ json: { status: a.status, retry_after: a.retry_after === null ? null : String(a.retry_after), later: a.status === 503 ? 'later' : 'now', end: a.end, body: a.body } }];`

// refusedForGoodJS says whether a write's evidence is a refusal for good: a 4xx other than 408, 409, 425 and 429,
// or a refusal without a status (class rejected: an SMTP 5xx). The webhooks answer it 422: the same content
// would be refused again.
const refusedForGoodJS = `// Refused for good: a 4xx other than 408, 409, 425, 429, or a refusal without a status (class rejected: an
// SMTP 5xx). The same content would be refused again.
const refusedForGood = (ev) => {
  const s = Number(ev.http_status);
  return (s >= 400 && s < 500 && ![408, 409, 425, 429].includes(s)) || (!!ev.error && ev.error.class === 'rejected');
};`

// doneJS continues the workflow after the answer: one item per item of the run.
const doneJS = `// Continue your workflow from here: $json.external_id and $json.result describe the write, one item per
// item of the run.
const body = $input.first().json.body;
return (Array.isArray(body.items) ? body.items : [body]).map((b) => ({ json: b }));`

// findingJS is the lookup's finding for POST /v1/reconcile (lookup-reconcile).
const findingJS = `// The lookup's finding for POST /v1/reconcile. Only a lookup that worked can say absent;
// a failing lookup is lookup_failed and the item waits for a person (seed 003).
const bw = $('Claim answer').item.json;
const ref = $('Settings').item.json.reference;
const out = { key: bw.key };
if ($json.statusCode === 200) {
  // YOUR DESTINATION: how its search answer lists the matches.
  const records = ($json.body && Array.isArray($json.body.records)) ? $json.body.records : null;
  if (records === null) {
    out.finding = 'lookup_failed';
    out.evidence = 'lookup by reference ' + ref + ' answered HTTP 200 without a records list';
  } else if (records.length > 0) {
    out.finding = 'found';
    out.external_id = String(records[0].id);
    out.evidence = 'lookup by reference ' + ref + ' found ' + records.map((r) => r.id).join(', ');
  } else {
    out.finding = 'absent';
    out.evidence = 'lookup by reference ' + ref + ' found no record (HTTP 200, empty list)';
  }
} else {
  out.finding = 'lookup_failed';
  out.evidence = typeof $json.statusCode === 'number'
    ? 'lookup by reference ' + ref + ' answered HTTP ' + $json.statusCode
    : 'lookup by reference ' + ref + ' failed: ' + String(($json.error && ($json.error.code || $json.error.message)) || 'error');
}
return { json: out };`
