#!/usr/bin/env bash
# Alternating A/B rounds of builds of companion on one machine, the way docs/performance-log.md compares
# them: per round and per build, a fresh ledger (serve on a new --data-dir), then three benches with the
# same bench client: 32 callers with --floor, one caller, batches of 500 at one caller and at two (issue 13
# measured batches at 1–4 callers; at two, one caller's JSON is decoded while the other's batch is
# written). One line per round and build: items/s and the service's CPU per item (µs) of each run, the
# floor and the ratios.
#
#   bash scripts/ab-rounds.sh ROUNDS CLIENT BUILD...     # e.g. 3 ./old-bin ./old-bin ./new-bin
#
# CLIENT is the companion binary whose bench runs (use the same one for every build); each BUILD is a
# companion binary to serve. Run it on a quiet machine: the service and the bench share its cores, and a
# neighbour's build moves the numbers more than most changes do. Not part of CI.
set -euo pipefail
rounds=$1 client=$2
shift 2
port=${AB_PORT:-18390}
for r in $(seq 1 "$rounds"); do
  for b in "$@"; do
    d=$(mktemp -d /tmp/ab-rounds.XXXXXX)
    "$b" serve --addr "127.0.0.1:$port" --data-dir "$d/data" >"$d/log" 2>&1 &
    pid=$!
    for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
    export COMPANION_URL="http://127.0.0.1:$port"
    mkdir -p "$d/floor"
    o32=$("$client" bench --callers 32 --items 10000 --floor "$d/floor" --floor-items 4000 2>&1)
    o1=$("$client" bench --callers 1 --items 2000 2>&1)
    ob=$("$client" bench --mode batch --batch 500 --callers 1 --items 50000 2>&1)
    ob2=$("$client" bench --mode batch --batch 500 --callers 2 --items 50000 2>&1)
    r32=$(awk '/single, 32/ {print $5}' <<<"$o32")
    fl=$(grep -oE "is [0-9.]+× the floor \([^)]*\)" <<<"$o32" || true)
    r1=$(awk '/single, 1 / {print $5}' <<<"$o1")
    rb=$(awk '/batch of 500/ {print $7}' <<<"$ob")
    rb2=$(awk '/batch of 500/ {print $7}' <<<"$ob2")
    c32=$(grep -o "Service CPU: [0-9]*" <<<"$o32" | awk '{print $3}' || true)
    cb=$(grep -o "Service CPU: [0-9]*" <<<"$ob" | awk '{print $3}' || true)
    ratio=$(awk -v b="$rb" -v o="$r1" 'BEGIN { if (o > 0) printf "%.1f", b / o }')
    ratio2=$(awk -v b="$rb2" -v o="$r1" 'BEGIN { if (o > 0) printf "%.1f", b / o }')
    echo "r$r $(basename "$b"): 32c=$r32 ($c32 µs) [$fl] | 1c=$r1 | batch=$rb ($cb µs) ratio=$ratio | batch 2 callers=$rb2 ratio=$ratio2"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    rm -rf "$d"
  done
done
