#!/usr/bin/env bash
# Proves the n8n templates in a real n8n 2.41.1: installs n8n if needed (idempotent), builds and packs the
# community node of n8n-node/ if needed, then runs every scenario (the templates, the sub-workflows, the
# community node installed from its tarball as its README writes) against `companion serve` and
# `companion receiver` on free loopback ports.
# Prints one line per scenario and ends with "N passed, M failed" (also when the install or the build
# fails, so CI always ends on that line); exits non-zero on failure.
# Run from anywhere. E2E_KEEP=1 keeps the temporary directory (logs, n8n folder, ledger);
# E2E_COMPANION=/path/to/companion runs against that binary instead of building ./cmd/companion;
# E2E_ONLY=node: runs only the scenarios whose name starts with that prefix (several: E2E_ONLY='single:|sub:').
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="$root/e2e/n8n/.work"

if ! bash "$root/e2e/n8n/install.sh"; then
  echo "FAIL install of n8n (e2e/n8n/install.sh)"
  echo "0 passed, 1 failed"
  exit 1
fi
cd "$root"
mkdir -p "$work"
# The community node (n8n-node/): its dist/ is reused when present and newer than its sources (.ci/run has
# just built it with n8n-node/test.sh), else built here.
built=n8n-node/dist/nodes/Companion/Companion.node.js
if [[ ! -f $built ]] || [[ -n $(find n8n-node/nodes n8n-node/credentials n8n-node/icons n8n-node/package.json n8n-node/package-lock.json -newer "$built" -print -quit) ]]; then
  echo "building n8n-node (npm ci --ignore-scripts, then its build)"
  if ! (cd n8n-node && { cmp -s package-lock.json node_modules/.companion-lock ||
    { npm ci --ignore-scripts --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.companion-lock; }; } && node scripts/build.mjs); then
    echo "FAIL build of n8n-node"
    echo "0 passed, 1 failed"
    exit 1
  fi
fi
# The tarball the README installs (npm pack of the built package), installed by the runner both ways the
# README writes (into n8n's nodes folder, and as the Docker recipe's custom extension).
rm -f "$work"/n8n-nodes-companion-*.tgz
if ! tarball=$(cd n8n-node && npm pack --silent --pack-destination "$work"); then
  echo "FAIL npm pack of n8n-node"
  echo "0 passed, 1 failed"
  exit 1
fi
export E2E_NODE_TARBALL="$work/$tarball"
# A built binary rather than `go run`, whose own "exit status 1" line would follow the summary.
if ! go build -o "$work/runner" ./e2e/n8n/runner; then
  echo "FAIL build of e2e/n8n/runner"
  echo "0 passed, 1 failed"
  exit 1
fi
exec "$work/runner"
