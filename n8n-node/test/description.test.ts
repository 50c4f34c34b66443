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

	it('the credential is tested by the node', () => {
		assert.deepEqual(type.description.credentials, [
			{ name: 'companionApi', required: true, testedBy: 'companionApiTest' },
		]);
		assert.equal(typeof type.methods.credentialTest.companionApiTest, 'function');
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
