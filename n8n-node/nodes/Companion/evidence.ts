// Pure logic of the Companion node: how a write's outcome becomes after-write evidence, which
// output a before-write decision goes to, and how items are split into batch calls. No n8n
// imports, so the unit tests run on the compiled file with node's own test runner.

/** The after-write body of one item, without key and claim (API.md, POST /v1/after-write). */
export interface Evidence {
	outcome: 'succeeded' | 'failed' | 'unknown';
	http_status?: number;
	external_id?: string;
	receiver_request_id?: string;
	result?: Record<string, unknown>;
	error?: { class: string; code: string; message: string };
	retry_after?: number;
}

/**
 * Transport failure codes (Node.js / axios, as n8n puts them on a node's error output) and the
 * after-write error class each one means. The same table as the n8n templates
 * (blueprints/model.go TransportErrors).
 */
export const TRANSPORT_CLASSES: Readonly<Record<string, string>> = {
	ECONNREFUSED: 'connection_refused',
	ENOTFOUND: 'dns',
	EAI_AGAIN: 'dns',
	ECONNABORTED: 'timeout',
	ETIMEDOUT: 'timeout',
	ESOCKETTIMEDOUT: 'timeout',
	ECONNRESET: 'connection_reset',
	EPIPE: 'connection_reset',
	EPROTO: 'tls',
	CERT_HAS_EXPIRED: 'tls',
	UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'tls',
	DEPTH_ZERO_SELF_SIGNED_CERT: 'tls',
};

/** Classes known to fail before anything was sent: only these make a transport failure "failed". */
export const PRE_DISPATCH_CLASSES: ReadonlySet<string> = new Set(['connection_refused', 'dns']);

/**
 * SMTP reply classes (the first digit of the reply code nodemailer puts in its error message) and the
 * after-write error class each one means: the mail server answered and refused the message, so it holds
 * none. 4xx is a refusal for now (421, 451: try later), retried after a backoff; 5xx is a refusal for good
 * (550: no such mailbox), never retried automatically. The same table as the n8n templates
 * (blueprints/model.go SMTPReplies).
 */
export const SMTP_REPLY_CLASSES: Readonly<Record<string, string>> = {
	'4': 'connection_refused',
	'5': 'rejected',
};

type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
	return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function clip(s: unknown): string {
	if (s === undefined || s === null) return '';
	const text = typeof s === 'string' ? s : JSON.stringify(s);
	return (text ?? '').slice(0, 300);
}

/** Reads a header case-insensitively from an n8n full response's headers object. */
function header(headers: unknown, name: string): string | undefined {
	if (!isObject(headers)) return undefined;
	for (const [k, v] of Object.entries(headers)) {
		if (k.toLowerCase() === name) {
			if (Array.isArray(v)) return v.length ? String(v[0]) : undefined;
			return v === undefined || v === null ? undefined : String(v);
		}
	}
	return undefined;
}

/**
 * Retry-After as whole seconds: delta-seconds, or an HTTP date counted from nowMs. Undefined when
 * absent, unparseable or not in the future.
 */
export function parseRetryAfter(value: string | undefined, nowMs: number): number | undefined {
	if (value === undefined) return undefined;
	const v = value.trim();
	let secs: number;
	if (/^\d+$/.test(v)) secs = Number(v);
	else secs = Math.ceil((Date.parse(v) - nowMs) / 1000);
	return Number.isFinite(secs) && secs > 0 ? secs : undefined;
}

/** An HTTP status as a number, from a number or a numeric string ("429"); else undefined. */
function statusOf(v: unknown): number | undefined {
	if (typeof v === 'number' && Number.isInteger(v) && v >= 100 && v <= 599) return v;
	if (typeof v === 'string' && /^[1-5]\d\d$/.test(v.trim())) return Number(v.trim());
	return undefined;
}

function fromStatus(status: number, headers: unknown, body: unknown, nowMs: number): Evidence {
	const ev: Evidence = { outcome: 'unknown', http_status: status };
	const rid = header(headers, 'x-request-id');
	if (rid) ev.receiver_request_id = rid;
	if (status >= 200 && status < 300) {
		ev.outcome = 'succeeded';
		if (isObject(body)) {
			if (body.id !== undefined && body.id !== null && body.id !== '') ev.external_id = String(body.id);
			ev.result = body;
		}
		return ev;
	}
	if (status < 400 || status > 599) return ev; // a redirect or an odd status proves nothing
	ev.outcome = 'failed';
	ev.error = { class: 'http', code: String(status), message: clip(body) };
	const ra = parseRetryAfter(header(headers, 'retry-after'), nowMs);
	if (ra !== undefined) ev.retry_after = ra;
	return ev;
}

/** Where a write node that is not an HTTP Request puts the id of what it wrote (Settings → external_id_fields of the templates, minus body.id). */
export const EXTERNAL_ID_FIELDS = ['id', 'messageId'] as const;

/**
 * Classifies one item that left the write node, as the n8n templates' Evidence node does
 * (blueprints/n8n_code.go evidenceJS).
 *
 * - An item carrying a numeric `statusCode` (an HTTP Request node with "Include Response Headers
 *   and Status") is classified by its status: 2xx succeeded, 1xx/3xx unknown, 4xx/5xx failed with
 *   class `http` (companion decides permanent, retryable or unknown from the status).
 * - An item from the write's error output (`json.error`, or `json.write_error` as the templates
 *   name it) is classified by the HTTP status the error carries (httpCode, statusCode, status, or
 *   "429 - …" in its message), else by its transport code (on the error, its cause, or named in
 *   its message: refused and DNS are failed, nothing was sent; timeout, reset, TLS are unknown),
 *   else by an SMTP reply code in its message (the mail server refused and holds nothing: failed,
 *   code smtp_NNN, class connection_refused for a 4xx, retried later, and rejected for a 5xx, never
 *   retried), else `unknown` with class `other`.
 * - Any other item is a success: the write node answered on its success output without a status
 *   (Send Email, a database node, …); its `id` or `messageId` is the external id.
 */
export function classifyWriteItem(json: Json, nowMs: number): Evidence {
	const raw = json.write_error !== undefined ? json.write_error : json.error;
	if (typeof json.statusCode === 'number' && (raw === undefined || raw === null)) {
		return fromStatus(json.statusCode, json.headers, json.body, nowMs);
	}
	if (raw === undefined || raw === null) {
		const ev: Evidence = { outcome: 'succeeded' };
		for (const f of EXTERNAL_ID_FIELDS) {
			const v = json[f];
			if (v !== undefined && v !== null && v !== '') {
				ev.external_id = String(v);
				break;
			}
		}
		return ev;
	}
	const err: Json = isObject(raw) ? raw : {};
	const cause: Json = isObject(err.cause) ? err.cause : {};
	const response: Json = isObject(err.response) ? err.response : isObject(cause.response) ? cause.response : {};
	const message = clip(
		typeof raw === 'string' ? raw : (err.message ?? err.description ?? JSON.stringify(raw)),
	);
	const status =
		statusOf(err.httpCode) ??
		statusOf(err.statusCode) ??
		statusOf(err.status) ??
		statusOf(response.status) ??
		statusOf(response.statusCode) ??
		statusOf((/^(\d{3}) - /.exec(message) ?? [])[1]);
	if (status !== undefined) {
		const body = response.data ?? response.body ?? message;
		return fromStatus(status, response.headers ?? err.headers, body, nowMs);
	}
	const named = (message.match(/\b[A-Z][A-Z_]{3,}\b/g) ?? []).find((c) => TRANSPORT_CLASSES[c]);
	const code = String(err.code ?? cause.code ?? named ?? '');
	const cls = TRANSPORT_CLASSES[code];
	if (cls) {
		return { outcome: PRE_DISPATCH_CLASSES.has(cls) ? 'failed' : 'unknown', error: { class: cls, code, message } };
	}
	// An SMTP reply (nodemailer puts it after a colon: "Message failed: 451 4.3.0 try later"): the
	// mail server refused the message and holds none, so nothing was committed; 4xx for now, 5xx for good.
	const smtp = /: ([45])(\d\d)[ -]/.exec(message);
	if (smtp) {
		return { outcome: 'failed', error: { class: SMTP_REPLY_CLASSES[smtp[1]], code: `smtp_${smtp[1]}${smtp[2]}`, message } };
	}
	return { outcome: 'unknown', error: { class: 'other', code, message } };
}

/** The four outputs of Before write, in order. */
export const BEFORE_WRITE_OUTPUTS = ['Proceed', 'Already done', 'Wait', 'Needs attention'] as const;
export const OUT_PROCEED = 0;
export const OUT_ALREADY_DONE = 1;
export const OUT_WAIT = 2;
export const OUT_NEEDS_ATTENTION = 3;

/**
 * The output a before-write decision goes to. proceed → Proceed; skip/succeeded → Already done;
 * skip/in_progress and skip/retry_later → Wait; everything else (conflict, reconcile/
 * lookup_required, skip/awaiting_owner, skip/attempts_exhausted, skip/failed_permanent, and any
 * decision or reason this version does not know) → Needs attention, so nothing is ever dropped.
 */
export function routeDecision(decision: unknown, reason: unknown): number {
	if (decision === 'proceed') return OUT_PROCEED;
	if (decision === 'skip') {
		if (reason === 'succeeded') return OUT_ALREADY_DONE;
		if (reason === 'in_progress' || reason === 'retry_later') return OUT_WAIT;
	}
	return OUT_NEEDS_ATTENTION;
}

/** The largest batch call the API takes. */
export const MAX_BATCH = 500;

/** Splits items into consecutive chunks of at most size, order kept. */
export function chunk<T>(items: T[], size = MAX_BATCH): T[][] {
	if (!(size >= 1)) size = MAX_BATCH;
	const out: T[][] = [];
	for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
	return out;
}

/**
 * The batch id of one execution of one node: the API's own example is "exec-1234:Send reminders".
 * Clipped to the API's 500 characters.
 */
export function batchIdFor(executionId: string, nodeName: string): string {
	return `exec-${executionId}:${nodeName}`.slice(0, 500);
}

/** The key from its four parts (API.md "Keys"): workflow:object:action:sequence. */
export function keyFromParts(workflow: string, object: string, action: string, sequence: string | number): string {
	return `${workflow}:${object}:${action}:${sequence}`;
}

/**
 * A payload parameter as a JSON object: an object as is, a string parsed. Anything else (an array,
 * a number, invalid JSON) is refused with a problem naming what was given.
 */
export function parsePayload(value: unknown): { payload: Record<string, unknown> } | { problem: string } {
	let v = value;
	if (typeof v === 'string') {
		const text = v.trim();
		if (text === '') return { problem: 'Payload is empty: give a JSON object such as {"invoice": "742"}' };
		try {
			v = JSON.parse(text);
		} catch (e) {
			return { problem: `Payload is not valid JSON: ${(e as Error).message}` };
		}
	}
	if (!isObject(v)) {
		return { problem: `Payload must be a JSON object, got ${v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v}` };
	}
	return { payload: v };
}
