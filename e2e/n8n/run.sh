#!/usr/bin/env bash
# Proves the n8n templates in a real n8n 2.41.1: installs n8n if needed (idempotent), then runs the
# scenarios of issue 7 against `companion serve` and `companion receiver` on free loopback ports.
# Prints one line per scenario and ends with "N passed, M failed"; exits non-zero on failure.
# Run from anywhere; E2E_KEEP=1 keeps the temporary directory (logs, n8n folder, ledger).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bash "$root/e2e/n8n/install.sh"
cd "$root"
exec go run ./e2e/n8n/runner
