#!/usr/bin/env bash
# Installs Debian's chromium for the console's browser tests (console/browser_test.go) when it is
# missing. Idempotent: with chromium on PATH it only prints the version. Needs root (or sudo) and apt.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
	chromium --version 2>/dev/null || true
	exit 0
fi
as_root=()
if [[ $(id -u) -ne 0 ]]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "install-chromium: chromium is missing, and this is neither root nor has sudo; as root: apt-get install -y chromium" >&2
		exit 1
	fi
	as_root=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update
"${as_root[@]}" apt-get install -y --no-install-recommends chromium
chromium --version
