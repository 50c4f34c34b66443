// The Companion node against the real companion service (test.sh starts `companion serve` on a
// free loopback port with one workflow token and passes COMPANION_TEST_URL / COMPANION_TEST_TOKEN).
// Only n8n's runtime is faked: its HTTP helper is a real fetch with the credential's header.
// Without the variables these tests skip and say why.
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import type { IDataObject, IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import { CompanionApi } from '../credentials/CompanionApi.credentials';
import { Companion } from '../nodes/Companion/Companion.node';

const URL_ = process.env.COMPANION_TEST_URL ?? '';
const TOKEN = process.env.COMPANION_TEST_TOKEN ?? '';
const skip = URL_ ? false : 'COMPANION_TEST_URL not set (n8n-node/test.sh starts companion serve and sets it)';
const run = `${process.pid}-${Date.now()}`;

async function http(opts: IDataObject): Promise<IDataObject> {
	const res = await fetch(String(opts.url), {
		method: String(opts.method),
		headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
		body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
	});
	const body = (await res.json()) as IDataObject;
	if (!res.ok) {
		// Shaped like n8n's HTTP errors: the response on error.response.
		const err = new Error(`Request failed with status code ${res.status}`) as Error & IDataObject;
		err.response = { status: res.status, data: body };
		throw err;
	}
	return body;
}

function ctx(params: (name: string, i: number) => unknown, input: INodeExecutionData[], nodeName = 'Before write'): IExecuteFunctions {
	return {
		getInputData: () => input,
		getNodeParameter: (name: string, i: number, fallback?: unknown) => params(name, i) ?? fallback,
		getExecutionId: () => run,
		getNode: () => ({ name: nodeName, type: 'n8n-nodes-companion.companion', typeVersion: 1, parameters: {} }),
		continueOnFail: () => false,
		getCredentials: async () => ({ baseUrl: URL_, token: TOKEN }),
		helpers: { httpRequestWithAuthentication: async (_: string, opts: IDataObject) => await http(opts) },
	} as unknown as IExecuteFunctions;
}

const keys = [`n8nnode-${run}:a`, `n8nnode-${run}:b`, `n8nnode-${run}:a`];
const before = (name: string, i: number): unknown =>
	({
		operation: 'beforeWrite',
		keyMode: 'key',
		key: keys[i],
		payloadMode: 'json',
		payloadJson: { n: i === 2 ? 0 : i },
		destination: 'billing',
		dedupe: 'key',
		reference: `R-${i}`,
		options: {},
	})[name];

describe('against companion serve', { skip }, () => {
	it('before-write, after-write with success and a reset, before-write again, get item', async () => {
		const node = new Companion();
		const first = await node.execute.call(ctx(before, keys.map((_, i) => ({ json: { i } }))));
		const proceed = first[0].map((it) => it.json.companion as IDataObject);
		assert.deepEqual(proceed.map((d) => d.key), [keys[0], keys[1]]);
		assert.ok(proceed.every((d) => d.decision === 'proceed' && String(d.claim).length > 0));
		// The same key again in the batch: claimed once, the repeat waits.
		assert.deepEqual(first[2].map((it) => [(it.json.companion as IDataObject).reason, it.json.i]), [['in_progress', 2]]);

		// The write: a for item a, a connection reset for item b.
		const writes: INodeExecutionData[] = [
			{ json: { statusCode: 201, headers: { 'x-request-id': 'req-1' }, body: { id: 'rec-1' } } },
			{ json: { error: { message: 'read ECONNRESET', code: 'ECONNRESET' } } },
		];
		const after = (name: string, i: number): unknown =>
			({ operation: 'afterWrite', key: proceed[i].key, claim: proceed[i].claim, externalId: '', options: {} })[name];
		const [reported] = await node.execute.call(ctx(after, writes, 'After write'));
		assert.deepEqual(reported.map((r) => [r.json.key, r.json.state]), [
			[keys[0], 'succeeded'],
			[keys[1], 'unknown'],
		]);

		const again = await node.execute.call(ctx(before, keys.map((_, i) => ({ json: { i } }))));
		// a is done (twice: the repeat too, with the same payload); b may be retried with the same key.
		assert.deepEqual(again[1].map((it) => (it.json.companion as IDataObject).external_id), ['rec-1', 'rec-1']);
		assert.deepEqual(again[0].map((it) => [(it.json.companion as IDataObject).key, (it.json.companion as IDataObject).reason]), [
			[keys[1], 'retry_same_key'],
		]);

		const get = (name: string): unknown => ({ operation: 'getItem', key: keys[0] })[name];
		const [item] = await node.execute.call(ctx(get, [{ json: {} }]));
		assert.equal(item[0].json.state, 'succeeded');
		assert.equal(item[0].json.external_id, 'rec-1');
	});

	it('a refused batch names the item it refused', async () => {
		const bad = (name: string, i: number): unknown => (name === 'key' && i === 1 ? 'no spaces allowed' : before(name, i));
		await assert.rejects(
			new Companion().execute.call(ctx(bad, [{ json: {} }, { json: {} }])),
			(err: Error & { context?: IDataObject }) => {
				assert.match(err.message, /400 invalid_request/);
				assert.equal(err.context?.itemIndex, 1);
				return true;
			},
		);
	});

	it('with On Error set to continue, a refused batch goes to Needs attention with companion\'s status and word', async () => {
		const bad = (name: string, i: number): unknown => (name === 'key' && i === 1 ? 'no spaces allowed' : before(name, i));
		const c = ctx(bad, [{ json: { i: 0 } }, { json: { i: 1 } }]);
		(c as unknown as { continueOnFail: () => boolean }).continueOnFail = () => true;
		const out = await new Companion().execute.call(c);
		assert.deepEqual(out.slice(0, 3).map((o) => o.length), [0, 0, 0]);
		const attention = out[3].map((it) => it.json.companion as IDataObject);
		assert.deepEqual(attention.map((a) => [a.key, a.http_status, a.code]), [
			[keys[0], 400, 'invalid_request'],
			['no spaces allowed', 400, 'invalid_request'],
		]);
		assert.match(String(attention[1].error), /items\[1\]\.key/);
	});

	it('the credential test request: the token accepted is 200, a wrong one 401 with its own message', async () => {
		const { request, rules } = new CompanionApi().test;
		// The baseURL expression's JavaScript, as n8n evaluates it with the credential's data.
		const expr = String(request.baseURL).replace(/^=\{\{(.*)\}\}$/s, '$1');
		const base = (baseUrl: string) => new Function('$credentials', `return ${expr}`)({ baseUrl }) as string;
		assert.equal(base(URL_ + '//'), URL_);
		const send = async (token: string) => {
			const qs = new URLSearchParams(Object.entries(request.qs ?? {}).map(([k, v]): [string, string] => [k, String(v)]));
			return await fetch(`${base(URL_ + '/')}${request.url}?${qs}`, { method: request.method, headers: { Authorization: `Bearer ${token}` } });
		};
		const ok = await send(TOKEN);
		assert.equal(ok.status, 200, 'a workflow token may list an execution\'s items');
		assert.deepEqual(((await ok.json()) as IDataObject).items, []);
		const wrong = await send('wrong-token-0123456789');
		assert.equal(wrong.status, 401);
		assert.ok(rules?.some((r) => r.type === 'responseCode' && r.properties.value === 401 && /refused the token/.test(r.properties.message)));
	});
});
