// Unit tests of the evidence classification, the decision → output routing and the batching of
// the Companion node, run with node's built-in runner on the compiled output (npm test).
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';

import {
	BEFORE_WRITE_OUTPUTS,
	OUT_ALREADY_DONE,
	OUT_NEEDS_ATTENTION,
	OUT_PROCEED,
	OUT_WAIT,
	PRE_DISPATCH_CLASSES,
	TRANSPORT_CLASSES,
	batchIdFor,
	chunk,
	classifyWriteItem,
	parsePayload,
	parseRetryAfter,
	routeDecision,
} from '../nodes/Companion/evidence';

const NOW = Date.parse('2026-12-01T06:00:00Z');

// The one table both classifiers run: the n8n templates' Evidence code (blueprints/evidence_test.go) and
// this node's classifyWriteItem. dist/test → the repository's blueprints/testdata.
describe('classifyWriteItem: the table the templates share (blueprints/testdata/write-evidence.json)', () => {
	const file = join(__dirname, '..', '..', '..', 'blueprints', 'testdata', 'write-evidence.json');
	const { cases } = JSON.parse(readFileSync(file, 'utf8')) as {
		cases: Array<{ name: string; output: 'success' | 'error'; item: unknown; want: Record<string, unknown> }>;
	};
	assert.ok(cases.length >= 10, `${file} holds ${cases.length} cases`);
	for (const c of cases) {
		it(c.name, () => {
			const json = c.output === 'error' ? { error: c.item } : (c.item as Record<string, unknown>);
			const { result: _result, ...got } = classifyWriteItem(json, NOW) as unknown as Record<string, unknown>;
			void _result;
			assert.deepEqual(got, c.want);
		});
	}
});

describe('classifyWriteItem: success output', () => {
	it('a 2xx full response is succeeded with the id, request id and body', () => {
		const ev = classifyWriteItem(
			{ statusCode: 201, headers: { 'X-Request-Id': 'req_81' }, body: { id: 'r-55', ok: true } },
			NOW,
		);
		assert.deepEqual(ev, {
			outcome: 'succeeded',
			http_status: 201,
			receiver_request_id: 'req_81',
			external_id: 'r-55',
			result: { id: 'r-55', ok: true },
		});
	});

	it('an item without statusCode (Send Email, a database node) is a success without http_status', () => {
		assert.deepEqual(classifyWriteItem({ messageId: '<a@b>', accepted: ['c@d'] }, NOW), {
			outcome: 'succeeded',
			external_id: '<a@b>',
		});
		assert.deepEqual(classifyWriteItem({ id: 42, name: 'row' }, NOW), { outcome: 'succeeded', external_id: '42' });
		assert.deepEqual(classifyWriteItem({ ok: true }, NOW), { outcome: 'succeeded' });
	});

	it('a 3xx is unknown: no evidence either way', () => {
		assert.deepEqual(classifyWriteItem({ statusCode: 302, headers: {}, body: '' }, NOW), {
			outcome: 'unknown',
			http_status: 302,
		});
	});

	it('a 429 with Retry-After seconds is failed/http with retry_after', () => {
		const ev = classifyWriteItem(
			{ statusCode: 429, headers: { 'retry-after': '30' }, body: 'Too Many Requests' },
			NOW,
		);
		assert.deepEqual(ev, {
			outcome: 'failed',
			http_status: 429,
			error: { class: 'http', code: '429', message: 'Too Many Requests' },
			retry_after: 30,
		});
	});

	it('a 503 with an HTTP-date Retry-After counts from now, rounded up', () => {
		const date = new Date(NOW + 90_500).toUTCString(); // HTTP dates have whole seconds
		const ev = classifyWriteItem({ statusCode: 503, headers: { 'Retry-After': date }, body: {} }, NOW);
		assert.equal(ev.outcome, 'failed');
		assert.equal(ev.retry_after, 90);
	});

	it('a 500 is failed/http; companion, not the node, decides it is unknown', () => {
		const ev = classifyWriteItem({ statusCode: 500, headers: {}, body: { message: 'boom' } }, NOW);
		assert.equal(ev.outcome, 'failed');
		assert.equal(ev.http_status, 500);
		assert.deepEqual(ev.error, { class: 'http', code: '500', message: '{"message":"boom"}' });
		assert.equal(ev.retry_after, undefined);
	});

	it('an error message is clipped to 300 characters', () => {
		const ev = classifyWriteItem({ statusCode: 400, body: 'x'.repeat(1000) }, NOW);
		assert.equal(ev.error?.message.length, 300);
	});
});

describe('classifyWriteItem: error output', () => {
	for (const [code, cls] of Object.entries(TRANSPORT_CLASSES)) {
		const outcome = PRE_DISPATCH_CLASSES.has(cls) ? 'failed' : 'unknown';
		it(`${code} is class ${cls}, ${outcome}`, () => {
			const ev = classifyWriteItem({ error: { message: `connect ${code}`, code } }, NOW);
			assert.deepEqual(ev, { outcome, error: { class: cls, code, message: `connect ${code}` } });
		});
	}

	it('refused and DNS are the only classes known to send nothing', () => {
		assert.deepEqual([...PRE_DISPATCH_CLASSES].sort(), ['connection_refused', 'dns']);
		assert.equal(classifyWriteItem({ error: { code: 'ECONNREFUSED' } }, NOW).outcome, 'failed');
		assert.equal(classifyWriteItem({ error: { code: 'ECONNRESET' } }, NOW).outcome, 'unknown');
	});

	it('a code found on error.cause is used', () => {
		const ev = classifyWriteItem({ error: { message: 'socket hang up', cause: { code: 'ECONNRESET' } } }, NOW);
		assert.equal(ev.error?.class, 'connection_reset');
		assert.equal(ev.outcome, 'unknown');
	});

	it('an error with an HTTP status (httpCode as n8n sets it) is classified by the status', () => {
		const ev = classifyWriteItem({ error: { message: 'Conflict', httpCode: '409' } }, NOW);
		assert.equal(ev.outcome, 'failed');
		assert.equal(ev.http_status, 409);
		assert.equal(ev.error?.class, 'http');
	});

	it('an error carrying a 429 response passes its Retry-After on', () => {
		const ev = classifyWriteItem(
			{ error: { message: 'Too Many', response: { status: 429, headers: { 'retry-after': '7' } } } },
			NOW,
		);
		assert.equal(ev.http_status, 429);
		assert.equal(ev.retry_after, 7);
	});

	it('a status in the message ("429 - …", as n8n words request errors) is used', () => {
		const ev = classifyWriteItem({ error: '429 - {"error":"slow down"}' }, NOW);
		assert.equal(ev.outcome, 'failed');
		assert.equal(ev.http_status, 429);
	});

	it('a transport code named only in the message is used', () => {
		assert.deepEqual(classifyWriteItem({ error: { message: 'connect ECONNREFUSED 127.0.0.1:2525' } }, NOW), {
			outcome: 'failed',
			error: { class: 'connection_refused', code: 'ECONNREFUSED', message: 'connect ECONNREFUSED 127.0.0.1:2525' },
		});
	});

	it('an SMTP refusal is failed: a 4xx connection_refused (retried later), a 5xx rejected (never retried)', () => {
		for (const [msg, cls, code] of [
			['Message failed: 451 4.3.0 try again later', 'connection_refused', 'smtp_451'],
			["Can't send mail - all recipients were rejected: 550 5.1.1 no such user", 'rejected', 'smtp_550'],
		]) {
			assert.deepEqual(classifyWriteItem({ write_error: msg }, NOW), {
				outcome: 'failed',
				error: { class: cls, code, message: msg },
			});
		}
		assert.equal(classifyWriteItem({ error: 'Connection closed unexpectedly' }, NOW).outcome, 'unknown');
	});

	it('an error without status or known code is unknown, class other', () => {
		assert.deepEqual(classifyWriteItem({ error: { message: 'SMTP said no' } }, NOW), {
			outcome: 'unknown',
			error: { class: 'other', code: '', message: 'SMTP said no' },
		});
		assert.deepEqual(classifyWriteItem({ error: 'plain text' }, NOW), {
			outcome: 'unknown',
			error: { class: 'other', code: '', message: 'plain text' },
		});
	});
});

describe('parseRetryAfter', () => {
	it('takes delta seconds and future dates, refuses the rest', () => {
		assert.equal(parseRetryAfter('1', NOW), 1);
		assert.equal(parseRetryAfter(' 120 ', NOW), 120);
		assert.equal(parseRetryAfter('0', NOW), undefined);
		assert.equal(parseRetryAfter('soon', NOW), undefined);
		assert.equal(parseRetryAfter(new Date(NOW - 5000).toUTCString(), NOW), undefined);
		assert.equal(parseRetryAfter(undefined, NOW), undefined);
	});
});

describe('routeDecision', () => {
	const cases: Array<[string, string, number]> = [
		['proceed', 'new', OUT_PROCEED],
		['proceed', 'retry', OUT_PROCEED],
		['proceed', 'retry_same_key', OUT_PROCEED],
		['skip', 'succeeded', OUT_ALREADY_DONE],
		['skip', 'in_progress', OUT_WAIT],
		['skip', 'retry_later', OUT_WAIT],
		['skip', 'awaiting_owner', OUT_NEEDS_ATTENTION],
		['skip', 'attempts_exhausted', OUT_NEEDS_ATTENTION],
		['skip', 'failed_permanent', OUT_NEEDS_ATTENTION],
		['conflict', 'fingerprint_mismatch', OUT_NEEDS_ATTENTION],
		['reconcile', 'lookup_required', OUT_NEEDS_ATTENTION],
		['something_new', 'whatever', OUT_NEEDS_ATTENTION],
	];
	for (const [decision, reason, out] of cases) {
		it(`${decision}/${reason} → ${BEFORE_WRITE_OUTPUTS[out]}`, () => {
			assert.equal(routeDecision(decision, reason), out);
		});
	}
	it('the outputs are named in order', () => {
		assert.deepEqual([...BEFORE_WRITE_OUTPUTS], ['Proceed', 'Already done', 'Wait', 'Needs attention']);
	});
});

describe('batching', () => {
	it('chunks of at most 500, order kept', () => {
		const items = Array.from({ length: 1050 }, (_, i) => i);
		const parts = chunk(items);
		assert.deepEqual(
			parts.map((p) => p.length),
			[500, 500, 50],
		);
		assert.deepEqual(parts.flat(), items);
		assert.deepEqual(chunk([]), []);
	});

	it('the batch id is the execution id and the node name, within 500 characters', () => {
		assert.equal(batchIdFor('1234', 'Send reminders'), 'exec-1234:Send reminders');
		assert.equal(batchIdFor('1', 'n'.repeat(600)).length, 500);
	});
});

describe('parsePayload', () => {
	it('takes an object or a JSON object text', () => {
		assert.deepEqual(parsePayload({ a: 1 }), { payload: { a: 1 } });
		assert.deepEqual(parsePayload(' {"invoice": "742", "amount": 120.5} '), {
			payload: { invoice: '742', amount: 120.5 },
		});
	});
	it('refuses arrays, scalars, null, empty and invalid JSON with a reason', () => {
		for (const v of ['[1]', '3', 'null', '', '{bad', [1], 7, null]) {
			const r = parsePayload(v);
			assert.ok('problem' in r, `accepted ${JSON.stringify(v)}`);
		}
	});
});
