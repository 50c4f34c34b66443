// The Companion node's execute() against a fake n8n execution context whose HTTP helper plays
// companion's batch endpoints: items reach the right output in order, in calls of at most 500
// with the execution id and node name as batch id, and After write reports classified evidence.
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import type { IDataObject, IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import { Companion } from '../nodes/Companion/Companion.node';

interface Call {
	method: string;
	url: string;
	body: IDataObject;
}

function fakeContext(
	params: (name: string, i: number) => unknown,
	input: INodeExecutionData[],
	answer: (call: Call) => IDataObject,
	calls: Call[],
): IExecuteFunctions {
	const ctx = {
		getInputData: () => input,
		getNodeParameter: (name: string, i: number, fallback?: unknown) => {
			const v = params(name, i);
			return v === undefined ? fallback : v;
		},
		getExecutionId: () => '77',
		getNode: () => ({ name: 'Before write', type: 'n8n-nodes-companion.companion', typeVersion: 1, parameters: {} }),
		continueOnFail: () => false,
		getCredentials: async () => ({ baseUrl: 'http://companion.test/', token: 't' }),
		helpers: {
			httpRequestWithAuthentication: async (cred: string, opts: IDataObject) => {
				assert.equal(cred, 'companionApi');
				const call = { method: String(opts.method), url: String(opts.url), body: opts.body as IDataObject };
				calls.push(call);
				return answer(call);
			},
		},
	};
	return ctx as unknown as IExecuteFunctions;
}

// Decides by the key's last word, as companion would for items in those states.
function decide(key: string): IDataObject {
	const word = key.split(':').pop();
	switch (word) {
		case 'done':
			return { decision: 'skip', reason: 'succeeded', external_id: 'x-1', result: { id: 'x-1' } };
		case 'busy':
			return { decision: 'skip', reason: 'in_progress', retry_after: 12 };
		case 'changed':
			return { decision: 'conflict', reason: 'fingerprint_mismatch' };
		case 'lost':
			return { decision: 'reconcile', reason: 'lookup_required' };
		default:
			return { decision: 'proceed', reason: 'new', claim: `c_${key}`, idempotency_key: 'ik_1' };
	}
}

const beforeParams = (name: string, i: number): unknown =>
	({
		operation: 'beforeWrite',
		keyMode: 'key',
		key: `inv:${i}:new`,
		payloadMode: 'json',
		payloadJson: `{"n": ${i}}`,
		destination: 'billing',
		dedupe: 'key',
		reference: `R-${i}`,
		options: {},
	})[name];
const KEYS = ['inv:1:new', 'inv:2:done', 'inv:3:busy', 'inv:4:changed', 'inv:5:lost'];

describe('Before write', () => {
	it('routes each decision to its output, in order, keeping the input item', async () => {
		const calls: Call[] = [];
		const input = KEYS.map((_, i) => ({ json: { row: i } }));
		const params = (name: string, i: number) => (name === 'key' ? KEYS[i] : beforeParams(name, i));
		const ctx = fakeContext(params, input, (c) => ({
			batch_id: c.body.batch_id,
			items: (c.body.items as IDataObject[]).map((it) => ({ key: it.key, ...decide(String(it.key)) })),
		}), calls);
		const out = await new Companion().execute.call(ctx);
		assert.equal(out.length, 4);
		const keys = out.map((o) => o.map((it) => (it.json.companion as IDataObject).key));
		assert.deepEqual(keys, [['inv:1:new'], ['inv:2:done'], ['inv:3:busy'], ['inv:4:changed', 'inv:5:lost']]);
		assert.deepEqual(out[0][0].json.row, 0);
		assert.deepEqual(out[0][0].pairedItem, { item: 0 });
		assert.deepEqual(out[3][1].pairedItem, { item: 4 });
		assert.equal(calls.length, 1);
		assert.equal(calls[0].url, 'http://companion.test/v1/batches/before-write');
		assert.equal(calls[0].body.batch_id, 'exec-77:Before write');
		const first = (calls[0].body.items as IDataObject[])[0];
		assert.deepEqual(first, {
			key: 'inv:1:new',
			payload: { n: 0 },
			destination: 'billing',
			dedupe: 'key',
			reference: 'R-0',
			execution_id: '77',
			batch_index: 0,
		});
	});

	it('a call that got no answer sends only its own items to Needs attention, unanswered; the other calls decide', async () => {
		const calls: Call[] = [];
		const input = Array.from({ length: 501 }, (_, i) => ({ json: { row: i } }));
		const ctx = fakeContext(
			beforeParams,
			input,
			(call) => {
				if (calls.length === 1) throw Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
				return { items: (call.body.items as IDataObject[]).map((it) => ({ key: it.key, ...decide(String(it.key)) })) };
			},
			calls,
		);
		(ctx as unknown as { continueOnFail: () => boolean }).continueOnFail = () => true;
		const out = await new Companion().execute.call(ctx);
		assert.equal(calls.length, 2, 'each call is sent once: nothing is asked again');
		assert.equal(out[0].length, 1, 'the second call\'s item proceeds');
		assert.deepEqual(out[0][0].pairedItem, { item: 500 });
		const attention = out[3].map((o) => o.json.companion as IDataObject);
		assert.equal(attention.length, 500);
		assert.deepEqual(
			[attention[0].key, attention[0].http_status, attention[0].code, attention[0].unanswered],
			['inv:0:new', null, 'no_answer', true],
		);
		assert.equal(attention[0].error, 'companion gave no answer (ECONNRESET): socket hang up');
	});

	it('1,050 items go in three calls of ≤500 under one batch id, batch_index 0–1,049', async () => {
		const calls: Call[] = [];
		const input = Array.from({ length: 1050 }, (_, i) => ({ json: { row: i } }));
		const params = (name: string, i: number) => (name === 'key' ? `inv:${i}:new` : beforeParams(name, i));
		const ctx = fakeContext(params, input, (c) => ({
			items: (c.body.items as IDataObject[]).map((it) => ({ key: it.key, ...decide(String(it.key)) })),
		}), calls);
		const out = await new Companion().execute.call(ctx);
		assert.deepEqual(calls.map((c) => (c.body.items as IDataObject[]).length), [500, 500, 50]);
		assert.deepEqual(new Set(calls.map((c) => c.body.batch_id)), new Set(['exec-77:Before write']));
		const indexes = calls.flatMap((c) => (c.body.items as IDataObject[]).map((it) => it.batch_index));
		assert.deepEqual(indexes, Array.from({ length: 1050 }, (_, i) => i));
		assert.deepEqual(out[0].map((it) => it.json.row), Array.from({ length: 1050 }, (_, i) => i));
	});

	it('a payload that is not a JSON object fails before anything is sent', async () => {
		const calls: Call[] = [];
		const params = (name: string, i: number) => (name === 'payloadJson' ? '[1, 2]' : name === 'key' ? 'k:1' : beforeParams(name, i));
		const ctx = fakeContext(params, [{ json: {} }], () => ({}), calls);
		await assert.rejects(new Companion().execute.call(ctx), /Payload must be a JSON object, got an array/);
		assert.equal(calls.length, 0);
	});
});

describe('After write', () => {
	it('reports the success and error outputs of the write in one call, classified, in order', async () => {
		const calls: Call[] = [];
		const input: INodeExecutionData[] = [
			{ json: { statusCode: 201, headers: {}, body: { id: 'r-1' } } },
			{ json: { messageId: '<m@x>' } },
			{ json: { error: { message: 'read ECONNRESET', code: 'ECONNRESET' } } },
			{ json: { statusCode: 429, headers: { 'retry-after': '3' }, body: 'slow down' } },
		];
		const params = (name: string, i: number): unknown =>
			({ operation: 'afterWrite', key: `k:${i}`, claim: `c_${i}`, externalId: '', options: {} })[name];
		const ctx = fakeContext(params, input, (c) => ({
			items: (c.body.items as IDataObject[]).map((it) => ({ key: it.key, state: 'x', reason: 'recorded' })),
		}), calls);
		const [out] = await new Companion().execute.call(ctx);
		assert.equal(calls.length, 1);
		assert.equal(calls[0].url, 'http://companion.test/v1/batches/after-write');
		const sent = calls[0].body.items as IDataObject[];
		assert.deepEqual(sent.map((s) => [s.key, s.claim, s.outcome]), [
			['k:0', 'c_0', 'succeeded'],
			['k:1', 'c_1', 'succeeded'],
			['k:2', 'c_2', 'unknown'],
			['k:3', 'c_3', 'failed'],
		]);
		assert.equal(sent[0].external_id, 'r-1');
		assert.equal(sent[1].http_status, undefined);
		assert.deepEqual(sent[1].result, { messageId: '<m@x>' });
		assert.deepEqual(sent[2].error, { class: 'connection_reset', code: 'ECONNRESET', message: 'read ECONNRESET' });
		assert.equal(sent[3].retry_after, 3);
		assert.deepEqual(out.map((o) => o.json.key), ['k:0', 'k:1', 'k:2', 'k:3']);
		assert.deepEqual(out.map((o) => o.pairedItem), [0, 1, 2, 3].map((item) => ({ item })));
	});

	it('an item without a claim fails with a message saying where to map it from', async () => {
		const params = (name: string): unknown =>
			({ operation: 'afterWrite', key: 'k:1', claim: '', externalId: '', options: {} })[name];
		const ctx = fakeContext(params, [{ json: { statusCode: 200 } }], () => ({}), []);
		await assert.rejects(new Companion().execute.call(ctx), /has no claim/);
	});
});

describe('Get item', () => {
	it('percent-encodes the key in the path', async () => {
		const calls: Call[] = [];
		const params = (name: string): unknown => ({ operation: 'getItem', key: 'a b/c' })[name];
		const ctx = fakeContext(params, [{ json: {} }], () => ({ key: 'a b/c', state: 'succeeded' }), calls);
		const [out] = await new Companion().execute.call(ctx);
		assert.equal(calls[0].url, 'http://companion.test/v1/items/a%20b%2Fc');
		assert.equal(out[0].json.state, 'succeeded');
	});
});
