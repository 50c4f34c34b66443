import { config } from '@n8n/node-cli/eslint';

// n8n's starter config for what ships (credentials/, nodes/, package.json). The unit tests and the
// build script are not shipped and use node:test / node:fs, which the community-node rules forbid.
export default [{ ignores: ['test/**', 'scripts/**'] }, ...config];
