// Build as n8n's node starter does: tsc, then the icons and node JSON files beside the compiled code.
import { execFileSync } from 'node:child_process';
import { cpSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';

rmSync('dist', { recursive: true, force: true });
execFileSync(process.execPath, ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.json'], { stdio: 'inherit' });

function copyAssets(dir) {
	for (const name of readdirSync(dir)) {
		const path = join(dir, name);
		if (statSync(path).isDirectory()) copyAssets(path);
		else if (name.endsWith('.svg') || name.endsWith('.png') || name.endsWith('.node.json')) {
			cpSync(path, join('dist', path));
		}
	}
}
for (const dir of ['icons', 'nodes', 'credentials']) copyAssets(dir);
