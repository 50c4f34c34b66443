import type { IAuthenticateGeneric, Icon, ICredentialType, INodeProperties } from 'n8n-workflow';

// Tested by the Companion node (testedBy: companionApiTest): /readyz, then an authenticated read,
// which a single test request cannot do (the read answers 404 for a key that does not exist).
export class CompanionApi implements ICredentialType {
	name = 'companionApi';

	displayName = 'Companion API';

	icon: Icon = 'file:../icons/companion.svg';

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
}
