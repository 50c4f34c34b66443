#!/usr/bin/env bash
# Proves the n8n templates in a real n8n 2.41.1: installs n8n if needed (idempotent), then runs the
# scenarios of issue 7 against `companion serve` and `companion receiver` on free loopback ports.
# Prints one line per scenario and ends with "N passed, M failed" (also when the install or the build
# fails, so CI always ends on that line); exits non-zero on failure.
# Run from anywhere. E2E_KEEP=1 keeps the temporary directory (logs, n8n folder, ledger);
# E2E_COMPANION=/path/to/companion runs against that binary instead of building ./cmd/companion.
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
# A built binary rather than `go run`, whose own "exit status 1" line would follow the summary.
if ! go build -o "$work/runner" ./e2e/n8n/runner; then
  echo "FAIL build of e2e/n8n/runner"
  echo "0 passed, 1 failed"
  exit 1
fi
exec "$work/runner"
