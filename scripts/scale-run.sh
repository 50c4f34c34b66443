#!/usr/bin/env bash
# The scale run of issue 13: loads a ledger on the embedded SQLite store to SCALE_ITEMS items through
# `companion serve` and `companion bench` (batches of 500, the way n8n and Make batch nodes load it), and
# at each checkpoint measures what an operator sees: single-item latency at 1 and 32 callers, GET
# /v1/stats and GET /metrics latency, disk per item, RSS and the cold start to ready. At the end it
# restarts serve with a retention of one minute and measures how long removing every settled item takes
# and the longest pause it caused.
#
# Not part of CI: 10M items take about half an hour of load and ~10 GB of disk on a 2-core machine.
#
#   SCALE_ITEMS=1000000 bash scripts/scale-run.sh            # checkpoints 10k, 100k, 1M
#   SCALE_ITEMS=10000000 bash scripts/scale-run.sh /data/run # also 10M, in /data/run
#
# SCALE_CHECKPOINTS overrides the checkpoints ("10000 1000000"); SCALE_CALLERS the batch callers of the
# load (default 2). The directory (default a new one under /tmp) keeps the ledger, serve's log and
# results.txt, the table printed at the end. A row's items are the checkpoint; its measurements add 12,000
# items (2,000 at one caller, 10,000 at 32), which bytes/it counts.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
items="${SCALE_ITEMS:-1000000}"
dir="${1:-$(mktemp -d /tmp/companion-scale.XXXXXX)}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
checkpoints="${SCALE_CHECKPOINTS:-}"
if [[ -z $checkpoints ]]; then
  for c in 10000 100000 1000000 10000000 100000000; do
    ((c < items)) && checkpoints+="$c "
  done
  checkpoints+="$items"
fi
callers="${SCALE_CALLERS:-2}"
addr=127.0.0.1:${SCALE_PORT:-18181}
export COMPANION_URL="http://$addr"
bin="$dir/companion"
results="$dir/results.txt"

say() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

say "building companion into $bin"
(cd "$root" && go build -o "$bin" ./cmd/companion)

write_config() { # retention
  cat >"$dir/companion.yaml" <<EOF
defaults:
  dedupe: none
  key_retention_seconds: 60
  retention: $1
EOF
}

pid=
ready_ms=
start_serve() { # sets pid, and ready_ms: the milliseconds from exec to a 200 from /readyz
  local t0 t1
  t0=$(date +%s%N)
  "$bin" serve --addr "$addr" --data-dir "$dir/data" --config "$dir/companion.yaml" --sweep-every "@every 1h" >>"$dir/serve.log" 2>&1 &
  pid=$!
  until curl -fs -o /dev/null "$COMPANION_URL/readyz"; do
    kill -0 "$pid" 2>/dev/null || { say "serve exited; see $dir/serve.log"; exit 1; }
    sleep 0.01
  done
  t1=$(date +%s%N)
  ready_ms=$(((t1 - t0) / 1000000))
}

stop_serve() {
  kill -TERM "$pid"
  wait "$pid" || true
}

# median_ms URL: the median of 5 GETs, in milliseconds.
median_ms() {
  for _ in 1 2 3 4 5; do curl -fs -o /dev/null -w '%{time_total}\n' "$1"; done |
    sort -n | sed -n 3p | awk '{printf "%.1f", $1 * 1000}'
}

# bench ARGS…: runs companion bench, keeps its output in the log, prints "items/s p99-before p99-after".
bench() {
  local out
  out="$("$bin" bench --prefix "scale$RANDOM" "$@" 2>/dev/null)"
  printf '%s\n' "$out" >>"$dir/bench.log"
  awk '/before-write/ {b = $(NF-1)} /after-write/ {a = $(NF-1)} /, [0-9]+ callers? / && $NF ~ /^[0-9]+$/ {r = $(NF-1)}
    END {printf "%s %s %s", r, b, a}' <<<"$out"
}

rss_mb() { awk '/^VmRSS/ {printf "%d", $2 / 1024}' "/proc/$pid/status"; }
disk_bytes() { du -cb "$dir/data"/companion.db* | tail -1 | cut -f1; }

write_config 720h
: >"$dir/serve.log"
start_serve
say "serve ready in ${ready_ms} ms; loading to $items items (checkpoints: $checkpoints)"
printf '%-10s %9s %9s %9s %9s %9s %9s %9s %9s %9s %8s %8s\n' items load_s load_it/s 1c_it/s 1c_p99ms 32c_it/s 32c_p99ms \
  stats_ms metrics_ms bytes/it rss_mb start_ms | tee "$results"
loaded=0
for cp in $checkpoints; do
  todo=$((cp - loaded))
  t0=$(date +%s)
  if ((todo > 0)); then
    read -r rate _ _ <<<"$(bench --mode batch --batch 500 --callers "$callers" --items "$todo")"
  else
    rate=-
  fi
  took=$(($(date +%s) - t0))
  ((todo > 0)) && loaded=$cp
  read -r one _ onep99 <<<"$(bench --items 2000 --callers 1)"
  read -r many _ manyp99 <<<"$(bench --items 10000 --callers 32)"
  loaded=$((loaded + 12000))
  stats="$(median_ms "$COMPANION_URL/v1/stats")"
  metrics="$(median_ms "$COMPANION_URL/metrics")"
  rss="$(rss_mb)"
  stop_serve
  per=$(($(disk_bytes) / loaded))
  start_serve
  printf '%-10s %9s %9s %9s %9s %9s %9s %9s %9s %9s %8s %8s\n' "$cp" "$took" "$rate" "$one" "$onep99" "$many" "$manyp99" \
    "$stats" "$metrics" "$per" "$rss" "$ready_ms" | tee -a "$results"
done

say "retention: restarting with retention 1m to remove all $loaded settled items"
stop_serve
sleep 61
write_config 1m
start_serve
until grep -q 'retention removed' "$dir/serve.log"; do sleep 1; done
line="$(grep 'retention removed' "$dir/serve.log" | tail -1)"
stop_serve
{
  echo
  num() { grep -oE "\"$1\":[0-9]+" <<<"$line" | cut -d: -f2; }
  echo "purge: removed $(num removed) settled items in $(($(num took) / 1000000)) ms; longest pause $(($(num longest_call) / 1000000)) ms"
  echo "disk after purge: $(disk_bytes) bytes"
} | tee -a "$results"
say "done; ledger, serve.log, bench.log and results.txt in $dir"
