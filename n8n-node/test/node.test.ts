// The Companion node's execute() against a fake n8n execution context whose HTTP helper plays
// companion's batch endpoints: items reach the right output in order, in calls of at most 500
// with the execution id and node name as batch id, and After write reports classified evidence.
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import type { IDataObject, IExecuteFunctions, INode, INodeExecutionData, INodeTypes, ISourceData } from 'n8n-workflow';
import { createRunExecutionData, NodeConnectionTypes, Workflow, WorkflowDataProxy } from 'n8n-workflow';

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
		getParentNodes: () => [],
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

	it('finds each item\'s claim through paired items, whatever Before write is called, through a write that replaces the JSON', async () => {
		// A real n8n-workflow Workflow and WorkflowDataProxy (the version n8n 2.41.1 runs) over the run data of
		// "Claim invoices" (a Before write renamed), a write whose success and error outputs replace the items'
		// JSON, and the Merge "Both outcomes" that feeds After write.
		const type = 'n8n-nodes-companion.companion';
		const node = (name: string, t: string, parameters: IDataObject = {}): INode => ({
			id: name, name, type: t, typeVersion: 1, position: [0, 0], parameters: parameters as INode['parameters'],
		});
		const nodes = [
			node('Claim invoices', type, { operation: 'beforeWrite' }),
			node('Claim other things', type, { operation: 'beforeWrite' }),
			node('Write', 'x.write'),
			node('Both outcomes', 'x.merge'),
			node('After write', type, { operation: 'afterWrite' }),
		];
		const to = (n: string, index = 0) => ({ node: n, type: NodeConnectionTypes.Main, index });
		const connections = {
			'Claim invoices': { main: [[to('Write')], [], [], []] },
			'Claim other things': { main: [[to('Write')], [], [], []] },
			Write: { main: [[to('Both outcomes', 0)], [to('Both outcomes', 1)]] },
			'Both outcomes': { main: [[to('After write')]] },
		};
		const plain = { description: { properties: [] } };
		const companion = new Companion();
		const nodeTypes = {
			getByName: (t: string) => (t === type ? companion : plain),
			getByNameAndVersion: (t: string) => (t === type ? companion : plain),
			getKnownTypes: () => ({}),
		} as unknown as INodeTypes;
		const workflow = new Workflow({ nodes, connections, active: false, nodeTypes });
		const task = (main: INodeExecutionData[][], source: ISourceData[]) => [{ startTime: 0, executionIndex: 0, executionTime: 1, source, data: { main } }];
		const claimed = (k: string) => ({ json: { invoice: k, companion: { key: `inv:${k}`, claim: `c_${k}`, decision: 'proceed' } } });
		const written = [
			{ json: { statusCode: 201, headers: {}, body: { id: 'r-a' } }, pairedItem: { item: 0 } },
			{ json: { statusCode: 201, headers: {}, body: { id: 'r-c' } }, pairedItem: { item: 2 } },
		];
		const failed = [{ json: { error: { message: 'read ECONNRESET', code: 'ECONNRESET' } }, pairedItem: { item: 1 } }];
		const merged = [
			{ ...written[0], pairedItem: { item: 0, input: 0 } },
			{ ...written[1], pairedItem: { item: 1, input: 0 } },
			{ ...failed[0], pairedItem: { item: 0, input: 1 } },
		];
		const run = createRunExecutionData({
			resultData: {
				runData: {
					'Claim invoices': task([[claimed('a'), claimed('b'), claimed('c')], [], [], []], []),
					Write: task([written, failed], [{ previousNode: 'Claim invoices', previousNodeOutput: 0 }]),
					'Both outcomes': task([merged], [
						{ previousNode: 'Write', previousNodeOutput: 0 },
						{ previousNode: 'Write', previousNodeOutput: 1 },
					]),
				},
			},
		});
		const self = nodes[4];
		// The input as n8n gives it to a node: each item paired with the previous node's output item it is
		// (WorkflowExecute's addPairedItemLineage).
		const input = merged.map((it, item) => ({ ...it, pairedItem: { item } }));
		const executeData = { node: self, data: { main: [input] }, source: { main: [{ previousNode: 'Both outcomes', previousNodeOutput: 0 }] } };
		const calls: Call[] = [];
		const ctx = fakeContext(
			(name) => ({ operation: 'afterWrite', key: '', claim: '', externalId: '', options: {} })[name],
			input,
			(c) => ({ items: (c.body.items as IDataObject[]).map((it) => ({ key: it.key, state: 'x', reason: 'recorded' })) }),
			calls,
		) as unknown as IDataObject;
		ctx.getNode = () => self;
		// n8n-core's getParentNodes: the workflow's parents of a node, nearest first, with their parameters.
		ctx.getParentNodes = (name: string) =>
			workflow.getParentNodes(name).map((n) => ({ ...workflow.nodes[n], disabled: false }));
		ctx.getWorkflowDataProxy = (i: number) =>
			new WorkflowDataProxy(workflow, run, 0, i, 'After write', input, {}, 'manual', {}, executeData).getDataProxy();
		ctx.logger = { debug: () => undefined };
		await new Companion().execute.call(ctx as unknown as IExecuteFunctions);
		const sent = calls[0].body.items as IDataObject[];
		assert.deepEqual(sent.map((s) => [s.key, s.claim, s.outcome]), [
			['inv:a', 'c_a', 'succeeded'],
			['inv:c', 'c_c', 'succeeded'],
			['inv:b', 'c_b', 'unknown'],
		]);
	});

	it('an item that carries its claim (a write that passes its input on) is its own claim', async () => {
		const calls: Call[] = [];
		const params = (name: string): unknown => ({ operation: 'afterWrite', key: '', claim: '', externalId: '', options: {} })[name];
		const ctx = fakeContext(params, [{ json: { companion: { key: 'k:1', claim: 'c_1' }, id: 'row-1' } }], (c) => ({
			items: (c.body.items as IDataObject[]).map((it) => ({ key: it.key, state: 'succeeded', reason: 'recorded' })),
		}), calls) as unknown as IDataObject;
		ctx.getParentNodes = () => [];
		ctx.getWorkflowDataProxy = () => ({});
		await new Companion().execute.call(ctx as unknown as IExecuteFunctions);
		assert.deepEqual((calls[0].body.items as IDataObject[]).map((s) => [s.key, s.claim, s.external_id]), [['k:1', 'c_1', 'row-1']]);
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
