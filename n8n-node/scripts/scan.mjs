// n8n's own verification scanner (@n8n/scan-community-package, pinned in devDependencies), run offline on
// the local files as n8n runs it on a published package (its analyzePackageByName): the sources with
// SOURCE_FILE_PATTERNS, and the packed tarball's compiled files with **/*.js and package.json. It lints with
// n8n's rules and ignores inline eslint-disable comments (allowInlineConfig: false).
//
// analyzePackage is n8n's verdict, and fails on errors only; the same files are linted once more with its
// own configuration (buildScanConfig) and options to count the warnings it does not report when there is no
// error. Any finding fails: prints every one and exits 1. Usage: node scripts/scan.mjs <tarball.tgz>
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

import {
	analyzePackage,
	buildScanConfig,
	SOURCE_FILE_PATTERNS,
} from '@n8n/scan-community-package/scanner/scanner.mjs';

// The ESLint and fast-glob the scanner itself loads.
const scannerRequire = createRequire(import.meta.resolve('@n8n/scan-community-package/scanner/scanner.mjs'));
const { ESLint } = scannerRequire('eslint');
const glob = scannerRequire('fast-glob');

const tarball = process.argv[2];
if (!tarball) {
	console.error('usage: node scripts/scan.mjs <n8n-nodes-companion-version.tgz>');
	process.exit(2);
}

// analyzePackage's own ESLint options and file selection (scanner.mjs), keeping the warnings.
async function findings(dir, patterns) {
	const eslint = new ESLint({
		cwd: dir,
		allowInlineConfig: false,
		overrideConfigFile: true,
		overrideConfig: await buildScanConfig(),
	});
	const files = glob.sync(patterns, { cwd: dir, absolute: true, ignore: ['node_modules/**', '**/package-lock.json'] });
	const results = await eslint.lintFiles(files);
	const formatter = await eslint.loadFormatter('stylish');
	return {
		files: files.length,
		errors: results.reduce((n, r) => n + r.errorCount, 0),
		warnings: results.reduce((n, r) => n + r.warningCount, 0),
		text: await formatter.format(results),
	};
}

const unpacked = mkdtempSync(join(tmpdir(), 'n8n-nodes-companion-scan-'));
let failed = false;
try {
	execFileSync('tar', ['-xzf', resolve(tarball), '-C', unpacked, '--strip-components=1']);
	for (const [what, dir, patterns] of [
		['sources', resolve('.'), SOURCE_FILE_PATTERNS],
		['tarball', unpacked, ['**/*.js', 'package.json']],
	]) {
		const verdict = await analyzePackage(dir, patterns);
		const f = await findings(dir, patterns);
		console.log(
			`scan ${what}: ${f.files} files, ${f.errors} errors, ${f.warnings} warnings (n8n's verdict: ${verdict.passed ? 'passed' : 'failed'})`,
		);
		if (!verdict.passed || f.errors + f.warnings > 0 || f.files === 0) {
			failed = true;
			console.log(f.text || verdict.message || '');
		}
	}
} finally {
	rmSync(unpacked, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
