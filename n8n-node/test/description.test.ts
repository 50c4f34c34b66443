// The node description as n8n itself reads it (n8n-workflow's Workflow and NodeHelpers, the version
// n8n 2.41.1 runs): the outputs expression gives four named outputs for Before write and one for
// the rest, and the Companion nodes of the repository's template use only parameters and option
// values the node knows.
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';

import type { INode, INodeProperties, INodeTypes, IDataObject } from 'n8n-workflow';
import { NodeHelpers, Workflow } from 'n8n-workflow';

import { CompanionApi } from '../credentials/CompanionApi.credentials';
import { Companion } from '../nodes/Companion/Companion.node';

const type = new Companion();
const nodeTypes = {
	getByName: () => type,
	getByNameAndVersion: () => type,
	getKnownTypes: () => ({}),
} as unknown as INodeTypes;

function node(parameters: IDataObject): INode {
	return {
		id: '1',
		name: 'Before write',
		type: 'n8n-nodes-companion.companion',
		typeVersion: 1,
		position: [0, 0],
		parameters: parameters as INode['parameters'],
	};
}

function outputs(operation: string) {
	const n = node({ operation });
	const wf = new Workflow({ nodes: [n], connections: {}, active: false, nodeTypes });
	return NodeHelpers.getNodeOutputs(wf, n, type.description);
}

describe('description', () => {
	it('Before write has the four named outputs, in order', () => {
		assert.deepEqual(outputs('beforeWrite'), [
			{ type: 'main', displayName: 'Proceed' },
			{ type: 'main', displayName: 'Already done' },
			{ type: 'main', displayName: 'Wait' },
			{ type: 'main', displayName: 'Needs attention' },
		]);
	});

	it('the other operations have one output', () => {
		for (const op of ['afterWrite', 'reconcile', 'getItem']) {
			assert.deepEqual(outputs(op), [{ type: 'main' }], op);
		}
	});

	it('the credential is tested declaratively, by one list both roles may read, with a word for each refusal', () => {
		assert.deepEqual(type.description.credentials, [{ name: 'companionApi', required: true }]);
		const test = new CompanionApi().test;
		assert.equal(test.request.method, 'GET');
		assert.equal(test.request.url, '/v1/items');
		assert.deepEqual(test.request.qs, { execution_id: 'n8n-credential-test', limit: 1 });
		const codes = (test.rules ?? []).map((r) => (r.type === 'responseCode' ? r.properties.value : r.type));
		assert.deepEqual(codes, [401, 403, 404, 503]);
	});

	it('the icons have a light and a dark variant, each file shipped', () => {
		const cred = new CompanionApi().icon as { light: string; dark: string };
		const nodeIcon = type.description.icon as { light: string; dark: string };
		for (const [dir, icon] of [
			['credentials', cred],
			[join('nodes', 'Companion'), nodeIcon],
		] as const) {
			assert.notEqual(icon.light, icon.dark);
			for (const file of [icon.light, icon.dark]) {
				// dist/test → dist/<dir>/<file>, as build.mjs copies the icons
				const svg = readFileSync(join(__dirname, '..', dir, file.replace(/^file:/, '')), 'utf8');
				assert.match(svg, /^<svg /);
			}
		}
	});

	it("the template's Companion nodes use known parameters and option values", () => {
		// dist/test → repository root
		const file = join(__dirname, '..', '..', '..', 'n8n-templates', 'guarded-write-node.json');
		const wf = JSON.parse(readFileSync(file, 'utf8')) as { nodes: Array<INode> };
		const companions = wf.nodes.filter((n) => n.type === 'n8n-nodes-companion.companion');
		assert.equal(companions.length, 2);
		for (const n of companions) {
			const shown = NodeHelpers.getNodeParameters(
				type.description.properties,
				n.parameters,
				true,
				false,
				n,
				type.description,
			) as IDataObject;
			for (const [name, value] of Object.entries(n.parameters)) {
				assert.ok(name in shown, `${n.name}: parameter ${name} is not shown for ${String(n.parameters.operation)}`);
				const props = type.description.properties.filter(
					(p: INodeProperties) => p.name === name && p.type === 'options',
				);
				if (props.length && typeof value === 'string' && !value.startsWith('=')) {
					const known = props.flatMap((p) => (p.options ?? []).map((o) => (o as { value: unknown }).value));
					assert.ok(known.includes(value), `${n.name}: ${name} = ${value} is not an option`);
				}
			}
		}
	});
});
