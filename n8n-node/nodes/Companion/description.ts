import type { INodeProperties } from 'n8n-workflow';

const show = (...operation: string[]) => ({ show: { operation } });

export const properties: INodeProperties[] = [
	{
		displayName: 'Operation',
		name: 'operation',
		type: 'options',
		noDataExpression: true,
		options: [
			{
				name: 'After Write',
				value: 'afterWrite',
				description: "Report what the write did: connect the write node's success and error outputs here",
				action: 'Report the outcome of a write',
			},
			{
				name: 'Before Write',
				value: 'beforeWrite',
				description: 'Claim each item before the write: proceed, already done, wait, or needs attention',
				action: 'Claim items before a write',
			},
			{
				name: 'Get Item',
				value: 'getItem',
				description: 'Read everything the ledger holds for a key',
				action: 'Get an item',
			},
			{
				name: 'Reconcile',
				value: 'reconcile',
				description: 'Report the lookup of an item whose outcome is unknown (found, absent, lookup failed)',
				action: 'Reconcile an unknown outcome',
			},
		],
		default: 'beforeWrite',
	},

	// ----- Before write -----
	{
		displayName: 'Key Mode',
		name: 'keyMode',
		type: 'options',
		noDataExpression: true,
		displayOptions: show('beforeWrite'),
		options: [
			{ name: 'Key', value: 'key', description: 'One key such as invoice-742:reminder:2' },
			{
				name: 'Four Parts',
				value: 'parts',
				description: 'Workflow, object, action and sequence; companion joins them with colons',
			},
		],
		default: 'key',
	},
	{
		displayName: 'Key',
		name: 'key',
		type: 'string',
		required: true,
		default: '',
		placeholder: 'invoice-742:reminder:2',
		displayOptions: { show: { operation: ['beforeWrite'], keyMode: ['key'] } },
		description:
			'Names ONE intended business effect. 1-200 characters of A-Z a-z 0-9 . _ : @ + = ~ -.',
		hint: 'Compute it from business data so every re-run of the same intent has the same key; never a run ID, a timestamp or a random value',
	},
	{
		displayName: 'Workflow',
		name: 'workflowPart',
		type: 'string',
		required: true,
		default: '',
		placeholder: 'invoice',
		displayOptions: { show: { operation: ['beforeWrite'], keyMode: ['parts'] } },
		description: 'First part of the key (no colon)',
	},
	{
		displayName: 'Object',
		name: 'objectPart',
		type: 'string',
		required: true,
		default: '',
		placeholder: '742',
		displayOptions: { show: { operation: ['beforeWrite'], keyMode: ['parts'] } },
		description: 'The business object the effect is about (no colon)',
	},
	{
		displayName: 'Action',
		name: 'actionPart',
		type: 'string',
		required: true,
		default: '',
		placeholder: 'reminder',
		displayOptions: { show: { operation: ['beforeWrite'], keyMode: ['parts'] } },
		description: 'What is done to the object (no colon)',
	},
	{
		displayName: 'Sequence',
		name: 'sequence',
		type: 'string',
		required: true,
		default: '1',
		placeholder: '2',
		displayOptions: { show: { operation: ['beforeWrite'], keyMode: ['parts'] } },
		description: 'Which occurrence of the action: a non-negative integer or a word (no colon)',
	},
	{
		displayName: 'Payload Mode',
		name: 'payloadMode',
		type: 'options',
		noDataExpression: true,
		displayOptions: show('beforeWrite'),
		options: [
			{ name: 'JSON', value: 'json', description: 'A JSON object; numbers and nesting kept' },
			{ name: 'Fields', value: 'fields', description: 'Name and value pairs, each value sent as text' },
		],
		default: 'json',
	},
	{
		displayName: 'Payload (JSON)',
		name: 'payloadJson',
		type: 'json',
		required: true,
		default: '{}',
		displayOptions: { show: { operation: ['beforeWrite'], payloadMode: ['json'] } },
		description:
			'The normalized parameters of the intended effect (recipient, amount, …). companion keeps only a keyed fingerprint of it, never the payload.',
		hint: 'The same key with a different payload after a write may have gone out is a conflict',
	},
	{
		displayName: 'Payload Fields',
		name: 'payloadFields',
		type: 'fixedCollection',
		typeOptions: { multipleValues: true },
		placeholder: 'Add Field',
		default: {},
		displayOptions: { show: { operation: ['beforeWrite'], payloadMode: ['fields'] } },
		description: 'The normalized parameters of the intended effect, as name and value pairs',
		options: [
			{
				name: 'field',
				displayName: 'Field',
				values: [
					{ displayName: 'Name', name: 'name', type: 'string', default: '' },
					{ displayName: 'Value', name: 'value', type: 'string', default: '' },
				],
			},
		],
	},
	{
		displayName: 'Destination',
		name: 'destination',
		type: 'string',
		default: 'default',
		displayOptions: show('beforeWrite'),
		description:
			"The destination's name in companion's configuration (dedupe mode, attempt budget, lease, owner)",
	},
	{
		displayName: 'Dedupe',
		name: 'dedupe',
		type: 'options',
		displayOptions: show('beforeWrite'),
		options: [
			{
				name: "Destination's Setting",
				value: '',
				description: "The destination's configured mode, else none",
			},
			{ name: 'Key', value: 'key', description: 'The destination honours an Idempotency-Key header' },
			{ name: 'Lookup', value: 'lookup', description: 'The destination can be searched by reference' },
			{ name: 'None', value: 'none', description: 'Neither: an unknown outcome waits for a person' },
		],
		default: '',
		description: 'What the destination can do about a repeated write',
	},
	{
		displayName: 'Reference',
		name: 'reference',
		type: 'string',
		default: '',
		placeholder: 'QT-2026-0417',
		displayOptions: show('beforeWrite'),
		description: 'The business reference people and lookups use (optional)',
	},
	{
		displayName: 'Options',
		name: 'options',
		type: 'collection',
		placeholder: 'Add Option',
		default: {},
		displayOptions: show('beforeWrite'),
		options: [
			{
				displayName: 'Lease (Seconds)',
				name: 'leaseSeconds',
				type: 'number',
				typeOptions: { minValue: 5, maxValue: 86400 },
				default: 300,
				description:
					'How long the claim is held for this write (5-86400). Past it an unreported write becomes unknown.',
			},
			{
				displayName: 'Owner',
				name: 'owner',
				type: 'string',
				default: '',
				placeholder: 'U024BE7LH',
				description: 'Slack user alerted when this item needs a person (overrides the destination owner)',
			},
		],
	},

	// ----- After write -----
	{
		displayName: 'Key',
		name: 'key',
		type: 'string',
		default: '',
		displayOptions: show('afterWrite'),
		description:
			'The key of the claim this write belongs to. Empty: the key Before write gave the item, found through the write node whatever the Before write node is called.',
		hint: 'Leave Key and Claim empty unless the write reaches this node by a way n8n cannot follow back to Before write',
	},
	{
		displayName: 'Claim',
		name: 'claim',
		type: 'string',
		default: '',
		displayOptions: show('afterWrite'),
		description: 'The claim Before write returned with Proceed. Empty: found as the key is.',
	},
	{
		displayName: 'External ID',
		name: 'externalId',
		type: 'string',
		default: '',
		displayOptions: show('afterWrite'),
		description:
			"The ID of what the write created. Empty: body.ID of an HTTP Request node's full response.",
	},
	{
		displayName: 'Options',
		name: 'options',
		type: 'collection',
		placeholder: 'Add Option',
		default: {},
		displayOptions: show('afterWrite'),
		options: [
			{
				displayName: 'Store Result',
				name: 'storeResult',
				type: 'boolean',
				default: true,
				description:
					'Whether to store what the write returned (up to 4 KiB) so a re-run that is already done gets it back',
			},
		],
	},
	{
		displayName:
			"Connect BOTH outputs of the write node here and set its Settings → On Error to 'Continue (using error output)'. Do not turn on Retry On Fail on the write.",
		name: 'afterWriteNotice',
		type: 'notice',
		default: '',
		displayOptions: show('afterWrite'),
	},

	// ----- Reconcile -----
	{
		displayName: 'Key',
		name: 'key',
		type: 'string',
		required: true,
		default: "={{ $json.companion.key }}",
		displayOptions: show('reconcile'),
		description: "The key Before write sent to Needs attention with reason 'lookup_required'",
	},
	{
		displayName: 'Finding',
		name: 'finding',
		type: 'options',
		displayOptions: show('reconcile'),
		options: [
			{ name: 'Absent', value: 'absent', description: 'The lookup proved the write never landed: one more attempt' },
			{ name: 'Found', value: 'found', description: 'The write landed: the item succeeds with this external ID' },
			{
				name: 'Lookup Failed',
				value: 'lookup_failed',
				description: 'The lookup did not work: the item waits for a person',
			},
		],
		default: 'found',
	},
	{
		displayName: 'External ID',
		name: 'externalId',
		type: 'string',
		required: true,
		default: '',
		displayOptions: { show: { operation: ['reconcile'], finding: ['found'] } },
		description: 'The ID of the record the lookup found',
	},
	{
		displayName: 'Evidence',
		name: 'evidence',
		type: 'string',
		required: true,
		default: '',
		placeholder: 'search by reference QT-2026-0417 returned record 9f2',
		displayOptions: show('reconcile'),
		description: 'What the lookup showed, at least 10 characters; kept in the item history',
	},

	// ----- Get item -----
	{
		displayName: 'Key',
		name: 'key',
		type: 'string',
		required: true,
		default: '',
		placeholder: 'invoice-742:reminder:2',
		displayOptions: show('getItem'),
		description: 'The key to read',
	},
];
