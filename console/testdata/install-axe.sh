#!/usr/bin/env bash
# Installs axe-core (the version pinned in console/testdata/axe/package-lock.json) for the console's
# accessibility checks (console/browser_test.go injects its axe.min.js into each page). Idempotent: it
# installs only when the lock file changed since the last install, and prints the path of axe.min.js.
# Needs npm; no install scripts run, nothing is fetched at test time.
set -euo pipefail
cd "$(dirname "$0")/axe"
stamp=node_modules/.companion-lock
if [[ ! -f $stamp ]] || ! cmp -s package-lock.json "$stamp" || [[ ! -f node_modules/axe-core/axe.min.js ]]; then
	if ! command -v npm >/dev/null 2>&1; then
		echo "install-axe: npm is missing; install Node.js and npm (Debian: apt-get install -y npm)" >&2
		exit 1
	fi
	npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	cp package-lock.json "$stamp"
fi
echo "axe-core $(node -p 'require("./node_modules/axe-core/package.json").version' 2>/dev/null || echo '?'): $(pwd)/node_modules/axe-core/axe.min.js"
