#!/usr/bin/env bash
# Installs promtool (Debian's prometheus package) for the test of the alert rules in
# deploy/prometheus/ (cmd/companion/cli/monitoring_test.go) when it is missing. Idempotent: with promtool
# on PATH it only prints its version. Needs root (or sudo) and apt.
set -euo pipefail
if command -v promtool >/dev/null 2>&1; then
	promtool --version 2>&1 | head -n 1
	exit 0
fi
as_root=()
if [[ $(id -u) -ne 0 ]]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "install-promtool: promtool is missing, and this is neither root nor has sudo; as root: apt-get install -y prometheus" >&2
		exit 1
	fi
	as_root=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update
"${as_root[@]}" apt-get install -y --no-install-recommends prometheus
promtool --version 2>&1 | head -n 1
