#!/usr/bin/env bash
# The n8n community node package: install (lock file, no install scripts), lint as n8n's node
# starter does, build, unit tests (node --test on the compiled output), npm pack, then n8n's own
# verification scanner (@n8n/scan-community-package, offline: scripts/scan.mjs) over the sources and
# the tarball's files, failing on any error or warning. The tests in
# test/service.test.ts run the node against a real `companion serve` (built from ../cmd/companion,
# SQLite in a temporary directory, one workflow token, a free loopback port), started here and
# stopped on exit; N8N_NODE_NO_SERVICE=1 skips them. Prints
# "n8n-node: N tests passed (M suites skipped), scanner clean, tarball <file>" on success; exits
# non-zero on any failure.
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

if [[ -z ${N8N_NODE_NO_SERVICE:-} ]]; then
	tmp=$(mktemp -d)
	pid=
	cleanup() {
		if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
		rm -rf "$tmp"
	}
	trap cleanup EXIT
	(cd .. && go build -o "$tmp/companion" ./cmd/companion)
	port=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
	export COMPANION_TEST_URL="http://127.0.0.1:$port" COMPANION_TEST_TOKEN="n8n-node-test-$$-$RANDOM"
	COMPANION_TOKENS="n8n-node:default:workflow:$COMPANION_TEST_TOKEN" \
		"$tmp/companion" serve --addr "127.0.0.1:$port" --data-dir "$tmp/ledger" >"$tmp/serve.log" 2>&1 &
	pid=$!
	for _ in $(seq 1 100); do
		if node -e 'fetch(process.argv[1]).then(r=>process.exit(r.ok?0:1),()=>process.exit(1))' "$COMPANION_TEST_URL/readyz"; then break; fi
		if ! kill -0 "$pid" 2>/dev/null; then cat "$tmp/serve.log" >&2; echo "n8n-node: companion serve did not start" >&2; exit 1; fi
		sleep 0.2
	done
fi
out=$(node --test --test-reporter=tap dist/test/*.test.js 2>&1) || { echo "$out"; echo "n8n-node: tests failed" >&2; exit 1; }
pass=$(grep -E '^# pass ' <<<"$out" | awk '{print $3}')
skipped=$(grep -cE '# SKIP' <<<"$out" || true)
tarball=$(npm pack --silent)
# n8n's verification scanner over the sources and the tarball's files, offline: any error or warning fails.
scan=$(node scripts/scan.mjs "$tarball") || { echo "$scan"; echo "n8n-node: n8n's scanner found problems" >&2; exit 1; }
echo "$scan"
echo "n8n-node: ${pass} tests passed (${skipped} suites skipped), scanner clean, tarball ${tarball}"
