#!/usr/bin/env bash
# The n8n community node package: install (lock file, no install scripts), lint as n8n's node
# starter does, build, unit tests (node --test on the compiled output), npm pack. Prints
# "n8n-node: N tests passed, tarball <file>" on success; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")"

# Installs only when the lock file changed since the last install.
stamp=node_modules/.companion-lock
if [[ ! -f $stamp ]] || ! cmp -s package-lock.json "$stamp"; then
	npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	cp package-lock.json "$stamp"
fi
npx --no-install eslint .
node scripts/build.mjs
out=$(node --test --test-reporter=tap dist/test/ 2>&1) || { echo "$out"; echo "n8n-node: tests failed" >&2; exit 1; }
pass=$(grep -E '^# pass ' <<<"$out" | awk '{print $3}')
tarball=$(npm pack --silent)
echo "n8n-node: ${pass} tests passed, tarball ${tarball}"
