import type {
	IAuthenticateGeneric,
	Icon,
	ICredentialTestRequest,
	ICredentialType,
	INodeProperties,
} from 'n8n-workflow';

export class CompanionApi implements ICredentialType {
	name = 'companionApi';

	displayName = 'Companion API';

	icon: Icon = { light: 'file:../icons/companion.svg', dark: 'file:../icons/companion.dark.svg' };

	documentationUrl = 'https://github.com/replaysafe/companion/blob/main/n8n-node/README.md#credentials';

	properties: INodeProperties[] = [
		{
			displayName: 'Base URL',
			name: 'baseUrl',
			type: 'string',
			default: 'http://127.0.0.1:8080',
			placeholder: 'https://companion.example.com',
			required: true,
			description: 'Where n8n reaches the companion service, without a trailing slash',
		},
		{
			displayName: 'Token',
			name: 'token',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			description:
				'The secret part of a companion token with the workflow (or operator) role. Leave empty only when companion runs open on loopback without tokens.',
		},
	];

	authenticate: IAuthenticateGeneric = {
		type: 'generic',
		properties: {
			headers: {
				Authorization: '=Bearer {{$credentials.token}}',
			},
		},
	};

	// One authenticated read both roles may make and that touches the store: the list of an execution's items
	// (GET /v1/items?execution_id=…, empty for this made-up execution). 200: companion is up, its store
	// reachable and the token accepted.
	test: ICredentialTestRequest = {
		request: {
			baseURL: '={{ String($credentials.baseUrl).replace(/\\/+$/, "") }}',
			url: '/v1/items',
			method: 'GET',
			qs: { execution_id: 'n8n-credential-test', limit: 1 },
		},
		rules: [
			{
				type: 'responseCode',
				properties: { value: 401, message: 'companion refused the token (401 unauthorized): give the secret of a companion token, the part after the third colon of name:tenant:role:secret' },
			},
			{
				type: 'responseCode',
				properties: { value: 403, message: 'companion refused this token the list of an execution\'s items (403 forbidden): that companion is older than this node; use a token with the operator role, or update companion' },
			},
			{
				type: 'responseCode',
				properties: { value: 404, message: 'no companion API at this Base URL (404): give the service\'s base URL, without /v1' },
			},
			{
				type: 'responseCode',
				properties: { value: 503, message: 'companion answered but cannot reach its store (503 store_unavailable)' },
			},
		],
	};
}
