import type {
	IDataObject,
	IExecuteFunctions,
	IHttpRequestMethods,
	INodeExecutionData,
	INodeType,
	INodeTypeDescription,
	JsonObject,
} from 'n8n-workflow';
import { NodeApiError, NodeConnectionTypes, NodeOperationError } from 'n8n-workflow';

import {
	BEFORE_WRITE_OUTPUTS,
	OUT_NEEDS_ATTENTION,
	batchIdFor,
	chunk,
	classifyWriteItem,
	parsePayload,
	routeDecision,
} from './evidence';
import { properties } from './description';

const CREDENTIAL = 'companionApi';

/** What companion's error body and the HTTP layer say about a failed call. */
function describeFailure(error: unknown): { status?: number; code?: string; message?: string; transport?: string } {
	const e = (error ?? {}) as IDataObject;
	const cause = (e.cause ?? {}) as IDataObject;
	const response = (e.response ?? cause.response ?? {}) as IDataObject;
	const status = Number(response.status ?? response.statusCode ?? e.httpCode ?? e.statusCode);
	let data = response.data ?? response.body ?? e.error;
	if (typeof data === 'string') {
		try {
			data = JSON.parse(data);
		} catch {
			// not JSON: keep the text
		}
	}
	const inner = data && typeof data === 'object' ? ((data as IDataObject).error as IDataObject) : undefined;
	return {
		status: Number.isFinite(status) ? status : undefined,
		code: inner && typeof inner.code === 'string' ? inner.code : undefined,
		message: inner && typeof inner.message === 'string' ? inner.message : (e.message as string),
		// The transport's code (ECONNRESET, ECONNREFUSED, ETIMEDOUT…) of a call that got no answer.
		transport: typeof e.code === 'string' ? e.code : typeof cause.code === 'string' ? cause.code : undefined,
	};
}

async function call(
	ctx: IExecuteFunctions,
	method: IHttpRequestMethods,
	path: string,
	itemIndex: number,
	body?: IDataObject,
): Promise<IDataObject> {
	const credentials = await ctx.getCredentials(CREDENTIAL);
	const base = String(credentials.baseUrl ?? '').replace(/\/+$/, '');
	try {
		return (await ctx.helpers.httpRequestWithAuthentication.call(ctx, CREDENTIAL, {
			method,
			url: base + path,
			body,
			json: true,
		})) as IDataObject;
	} catch (error) {
		const f = describeFailure(error);
		const words = [f.status, f.code].filter((x) => x !== undefined).join(' ');
		const failed = new NodeApiError(ctx.getNode(), error as JsonObject, {
			itemIndex,
			message: `companion ${method} ${path.split('?')[0]} failed${words ? ` (${words})` : ''}: ${f.message ?? 'no answer'}`,
			httpCode: f.status !== undefined ? String(f.status) : undefined,
		});
		// What companion answered, for an item routed to Needs attention (Settings → On Error).
		(failed as NodeApiError & { companionFailure?: Failure }).companionFailure = f;
		throw failed;
	}
}

type Failure = ReturnType<typeof describeFailure>;

/** The companion field of an item whose call failed: companion's HTTP status, error word and message when
 * it answered (a refused request, e.g. 400 invalid_request: nothing was claimed; n8n replaces the message of
 * a NodeApiError with a 400 by its own "Bad request"), else the error's message. A call that got no answer at
 * all (companion unreachable, the connection reset, a timeout: no HTTP status) is marked unanswered with the
 * word no_answer: only its own items are concerned (asked again, the items of the other calls would meet
 * their own claims), and the workflow answers them 503 so that the sender delivers them again. */
function failureOf(error: unknown): IDataObject {
	const f = (error as { companionFailure?: Failure }).companionFailure;
	const words = f?.code ? f.message : undefined;
	const unanswered = f !== undefined && f.status === undefined;
	// n8n replaces a transport error's message by its own words ("The connection to the server was closed
	// unexpectedly…"): the answer keeps the transport's code and message.
	const lost = unanswered
		? `companion gave no answer${f.transport ? ` (${f.transport})` : ''}: ${f.message ?? (error as Error).message}`
		: undefined;
	return {
		error: words ?? lost ?? (error as Error).message,
		http_status: f?.status ?? null,
		code: f?.code ?? (unanswered ? 'no_answer' : null),
		...(unanswered ? { unanswered: true } : {}),
	};
}

/** The position "items[3].key" names in a batch call's 400, if any. */
function namedIndex(error: unknown): number | undefined {
	const m = /items\[(\d+)\]/.exec(String((error as Error)?.message ?? ''));
	return m ? Number(m[1]) : undefined;
}

function str(ctx: IExecuteFunctions, name: string, i: number, fallback = ''): string {
	const v = ctx.getNodeParameter(name, i, fallback);
	return v === undefined || v === null ? '' : String(v).trim();
}

async function beforeWrite(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
	const items = this.getInputData();
	const out: INodeExecutionData[][] = BEFORE_WRITE_OUTPUTS.map(() => []);
	const executionId = String(this.getExecutionId() ?? '');
	const batchId = batchIdFor(executionId, this.getNode().name);
	const pending: Array<{ index: number; body: IDataObject }> = [];

	for (let i = 0; i < items.length; i++) {
		try {
			const body: IDataObject = {};
			if (this.getNodeParameter('keyMode', i) === 'parts') {
				const seq = str(this, 'sequence', i);
				body.workflow = str(this, 'workflowPart', i);
				body.object = str(this, 'objectPart', i);
				body.action = str(this, 'actionPart', i);
				body.sequence = /^\d+$/.test(seq) ? Number(seq) : seq;
			} else {
				body.key = str(this, 'key', i);
			}
			if (this.getNodeParameter('payloadMode', i) === 'fields') {
				const fields = this.getNodeParameter('payloadFields.field', i, []) as Array<{
					name: string;
					value: string;
				}>;
				const payload: IDataObject = {};
				for (const f of fields) {
					if (!f.name) continue;
					if (Object.prototype.hasOwnProperty.call(payload, f.name)) {
						throw new NodeOperationError(this.getNode(), `Payload field "${f.name}" is given twice`, {
							itemIndex: i,
						});
					}
					payload[f.name] = f.value;
				}
				body.payload = payload;
			} else {
				const parsed = parsePayload(this.getNodeParameter('payloadJson', i));
				if ('problem' in parsed) {
					throw new NodeOperationError(this.getNode(), parsed.problem, { itemIndex: i });
				}
				body.payload = parsed.payload as IDataObject;
			}
			const destination = str(this, 'destination', i);
			if (destination) body.destination = destination;
			const dedupe = str(this, 'dedupe', i);
			if (dedupe) body.dedupe = dedupe;
			const reference = str(this, 'reference', i);
			if (reference) body.reference = reference;
			const options = this.getNodeParameter('options', i, {}) as IDataObject;
			if (options.leaseSeconds !== undefined && options.leaseSeconds !== '') {
				body.lease_seconds = Number(options.leaseSeconds);
			}
			if (options.owner) body.owner = String(options.owner);
			if (executionId) body.execution_id = executionId;
			body.batch_index = i;
			pending.push({ index: i, body });
		} catch (error) {
			if (!this.continueOnFail()) {
				throw new NodeOperationError(this.getNode(), error as Error, { itemIndex: i });
			}
			out[OUT_NEEDS_ATTENTION].push({
				json: { ...items[i].json, companion: { error: (error as Error).message } },
				pairedItem: { item: i },
			});
		}
	}

	for (const part of chunk(pending)) {
		let answer: IDataObject;
		try {
			answer = await call(this, 'POST', '/v1/batches/before-write', part[0].index, {
				batch_id: batchId,
				items: part.map((p) => p.body),
			});
		} catch (error) {
			const named = namedIndex(error);
			if (!this.continueOnFail()) {
				if (named !== undefined && part[named]) (error as NodeApiError).context.itemIndex = part[named].index;
				throw new NodeApiError(this.getNode(), error as JsonObject);
			}
			for (const p of part) {
				out[OUT_NEEDS_ATTENTION].push({
					json: { ...items[p.index].json, companion: { key: p.body.key ?? null, ...failureOf(error) } },
					pairedItem: { item: p.index },
				});
			}
			continue;
		}
		const decided = (answer.items ?? []) as IDataObject[];
		if (decided.length !== part.length) {
			throw new NodeOperationError(
				this.getNode(),
				`companion answered ${decided.length} decisions for ${part.length} items`,
			);
		}
		part.forEach((p, j) => {
			const d = decided[j];
			out[routeDecision(d.decision, d.reason)].push({
				json: { ...items[p.index].json, companion: d },
				pairedItem: { item: p.index },
			});
		});
	}
	return out;
}

/** The Before write nodes before this one, nearest first: nodes of this node's own type (the community
 * package's, or CUSTOM.companion from a custom extensions folder) whose operation is Before write, the
 * operation's default. */
function beforeWriteNodes(ctx: IExecuteFunctions): string[] {
	const self = ctx.getNode();
	return ctx
		.getParentNodes(self.name, { includeNodeParameters: true })
		.filter((n) => n.type === self.type && !n.disabled && (n.parameters?.operation ?? 'beforeWrite') === 'beforeWrite')
		.map((n) => n.name);
}

/** The key and claim Before write gave the item that became input item i, whatever that node is called:
 * n8n's paired items lead from the write's output (success or error) back to the Before write item it was
 * written for, also through a write node that replaces the item's JSON and through Merge nodes. An item
 * that carries companion itself (a write node that passes its input on) is its own claim. */
function claimOf(ctx: IExecuteFunctions, beforeWrites: string[], i: number, json: IDataObject): { key: string; claim: string } {
	const read = (c: unknown) => {
		const d = (c ?? {}) as IDataObject;
		return typeof d.claim === 'string' && d.claim && typeof d.key === 'string' ? { key: d.key, claim: d.claim } : undefined;
	};
	const proxy = ctx.getWorkflowDataProxy(i);
	for (const name of beforeWrites) {
		let paired: INodeExecutionData | undefined;
		try {
			paired = (proxy.$(name) as { item?: INodeExecutionData }).item;
		} catch (error) {
			// This item did not come through that node (another branch): the next one may be it.
			ctx.logger.debug(`After write: item ${i} is not paired with an item of ${name}`, { error: (error as Error).message });
			continue;
		}
		const found = read(paired?.json?.companion);
		if (found) return found;
	}
	return read(json.companion) ?? { key: '', claim: '' };
}

async function afterWrite(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
	const items = this.getInputData();
	const out: INodeExecutionData[] = [];
	const pending: Array<{ index: number; report: IDataObject }> = [];
	const now = Date.now();
	// Looked up once, for the first item whose Key and Claim are left empty.
	let beforeWrites: string[] | undefined;
	for (let i = 0; i < items.length; i++) {
		try {
			let key = str(this, 'key', i);
			let claim = str(this, 'claim', i);
			if (!key && !claim) {
				beforeWrites ??= beforeWriteNodes(this);
				({ key, claim } = claimOf(this, beforeWrites, i, items[i].json as IDataObject));
			}
			if (!key || !claim) {
				throw new NodeOperationError(
					this.getNode(),
					key || claim
						? `Item ${i} has no ${key ? 'claim' : 'key'}: give both Key and Claim, or leave both empty`
						: `Item ${i} has no claim: it did not come from the Proceed output of a Before write node (${
								beforeWrites?.length ? beforeWrites.join(', ') : 'none precedes this node'
							}) through the write; connect it so, or map Key and Claim`,
					{ itemIndex: i },
				);
			}
			const ev = classifyWriteItem(items[i].json as IDataObject, now);
			const report: IDataObject = { key, claim, ...ev };
			const externalId = str(this, 'externalId', i);
			if (ev.outcome === 'succeeded' && externalId) report.external_id = externalId;
			const options = this.getNodeParameter('options', i, {}) as IDataObject;
			if (ev.outcome === 'succeeded' && ev.result === undefined && options.storeResult !== false) {
				// A write without an HTTP status (Send Email, a database node): its output is the result.
				if (Object.keys(items[i].json).length) report.result = items[i].json as IDataObject;
			}
			if (options.storeResult === false) delete report.result;
			pending.push({ index: i, report });
		} catch (error) {
			if (!this.continueOnFail()) {
				throw new NodeOperationError(this.getNode(), error as Error, { itemIndex: i });
			}
			out.push({ json: { error: (error as Error).message }, pairedItem: { item: i } });
		}
	}
	for (const part of chunk(pending)) {
		let answer: IDataObject;
		try {
			answer = await call(this, 'POST', '/v1/batches/after-write', part[0].index, {
				items: part.map((p) => p.report),
			});
		} catch (error) {
			if (!this.continueOnFail()) {
				const named = namedIndex(error);
				if (named !== undefined && part[named]) (error as NodeApiError).context.itemIndex = part[named].index;
				throw new NodeApiError(this.getNode(), error as JsonObject);
			}
			for (const p of part) {
				out.push({
					json: { key: p.report.key, evidence: p.report, error: (error as Error).message },
					pairedItem: { item: p.index },
				});
			}
			continue;
		}
		const results = (answer.items ?? []) as IDataObject[];
		part.forEach((p, j) => {
			const { key: _k, claim: _c, ...evidence } = p.report;
			void _k;
			void _c;
			out.push({ json: { ...(results[j] ?? {}), evidence }, pairedItem: { item: p.index } });
		});
	}
	return [out];
}

async function reconcile(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
	const items = this.getInputData();
	const out: INodeExecutionData[] = [];
	for (let i = 0; i < items.length; i++) {
		try {
			const finding = str(this, 'finding', i);
			const body: IDataObject = { key: str(this, 'key', i), finding, evidence: str(this, 'evidence', i) };
			if (finding === 'found') body.external_id = str(this, 'externalId', i);
			const answer = await call(this, 'POST', '/v1/reconcile', i, body);
			out.push({ json: answer, pairedItem: { item: i } });
		} catch (error) {
			if (!this.continueOnFail()) throw new NodeApiError(this.getNode(), error as JsonObject);
			out.push({ json: { error: (error as Error).message }, pairedItem: { item: i } });
		}
	}
	return [out];
}

async function getItem(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
	const items = this.getInputData();
	const out: INodeExecutionData[] = [];
	for (let i = 0; i < items.length; i++) {
		try {
			const key = str(this, 'key', i);
			const answer = await call(this, 'GET', `/v1/items/${encodeURIComponent(key)}`, i);
			out.push({ json: answer, pairedItem: { item: i } });
		} catch (error) {
			if (!this.continueOnFail()) throw new NodeApiError(this.getNode(), error as JsonObject);
			out.push({ json: { error: (error as Error).message }, pairedItem: { item: i } });
		}
	}
	return [out];
}

export class Companion implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Companion',
		name: 'companion',
		icon: { light: 'file:companion.svg', dark: 'file:companion.dark.svg' },
		group: ['transform'],
		version: 1,
		subtitle: '={{ {"beforeWrite": "Before write", "afterWrite": "After write", "reconcile": "Reconcile", "getItem": "Get item"}[$parameter["operation"]] }}',
		description: 'Make a write replay-safe: ask companion before it, report what happened after it',
		defaults: {
			name: 'Companion',
		},
		// Not offered as an AI tool: its outputs branch a workflow around a write.
		usableAsTool: undefined,
		inputs: [NodeConnectionTypes.Main],
		outputs: `={{ $parameter["operation"] === "beforeWrite" ? ${JSON.stringify(
			BEFORE_WRITE_OUTPUTS.map((displayName) => ({ type: 'main', displayName })),
		)} : [{"type": "main"}] }}`,
		credentials: [
			{
				name: 'companionApi',
				required: true,
			},
		],
		properties,
	};

	async execute(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
		const operation = this.getNodeParameter('operation', 0) as string;
		// Each operation handles Continue On Fail per item; what reaches this catch concerns the
		// whole call (an answer companion should not give).
		try {
			switch (operation) {
				case 'beforeWrite':
					return await beforeWrite.call(this);
				case 'afterWrite':
					return await afterWrite.call(this);
				case 'reconcile':
					return await reconcile.call(this);
				case 'getItem':
					return await getItem.call(this);
				default:
					throw new NodeOperationError(this.getNode(), `Unknown operation "${operation}"`);
			}
		} catch (error) {
			if (this.continueOnFail()) {
				return [this.getInputData().map((_, i) => ({ json: { error: (error as Error).message }, pairedItem: { item: i } }))];
			}
			if (error instanceof NodeApiError) throw new NodeApiError(this.getNode(), error as unknown as JsonObject);
			throw new NodeOperationError(this.getNode(), error as Error);
		}
	}
}
