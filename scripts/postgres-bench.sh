#!/usr/bin/env bash
# Measures companion on PostgreSQL: `companion serve` on the PostgreSQL of POSTGRES_URL (in a schema of its
# own, dropped at the end), loaded by `companion bench` through HTTP, against the rival a user would
# otherwise write (`bench --floor postgres`), with the CPU per item of the service and of PostgreSQL:
#
#   1. the floor alone, 32 callers (PostgreSQL's CPU per item);
#   2. single items at 32 callers, with the floor in the same run (its ratio to the floor, p99);
#   3. single items at 32 callers alone (the CPU per item, without the floor's);
#   4. single items at 1 caller;
#   5. batches of 500 at 1 caller.
#
# Not part of CI. On the 2-core development VM it takes about a minute. A warm-up of BENCH_WARM_ITEMS
# (default 2000) single items at 32 callers comes first, not measured.
#
#   POSTGRES_URL=postgres://companion_test:companion_test@127.0.0.1:5432/companion_test bash scripts/postgres-bench.sh
#
# BENCH_ITEMS (default 20000) are the items of runs 2, 3 and 5, BENCH_FLOOR_ITEMS (default 20000) the
# floor's, BENCH_ONE_ITEMS (default 3000) run 4's; BENCH_BIN a companion binary to measure instead of one
# built from this checkout. The directory (default a new one under /tmp) keeps the binary,
# serve's log and every run's output. PostgreSQL's CPU is the CPU time of every process of the server's
# user (postgres) over the run, children that exited included: run it where nothing else uses that server.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$(mktemp -d /tmp/companion-pgbench.XXXXXX)}"
mkdir -p "$dir"
items="${BENCH_ITEMS:-20000}"
floor_items="${BENCH_FLOOR_ITEMS:-20000}"
one_items="${BENCH_ONE_ITEMS:-3000}"
: "${POSTGRES_URL:?set POSTGRES_URL to the server to measure}"
export POSTGRES_SCHEMA="bench_$(date +%s)"
port="${BENCH_PORT:-18282}"
export COMPANION_URL="http://127.0.0.1:$port"
bin="${BENCH_BIN:-$dir/companion}"
ticks=$(getconf CLK_TCK)

say() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

if [[ -z ${BENCH_BIN:-} ]]; then
	say "building companion into $bin"
	(cd "$root" && go build -o "$bin" ./cmd/companion)
fi

# cpu_of PID…: the user and system CPU ticks of the processes (and, for each, of its children that exited).
cpu_of() {
	local total=0 p f
	for p in "$@"; do
		[[ -r /proc/$p/stat ]] || continue
		f=$(sed 's/^.*) //' "/proc/$p/stat")
		# after the command's name: field 12 utime, 13 stime, 14 cutime, 15 cstime
		total=$((total + $(awk '{print $12 + $13 + $14 + $15}' <<<"$f")))
	done
	echo "$total"
}
pg_cpu() { cpu_of $(pgrep -u postgres || true); }

"$bin" serve --addr "127.0.0.1:$port" --sweep-every "@every 1h" >>"$dir/serve.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; psql "$POSTGRES_URL" -qc "DROP SCHEMA IF EXISTS $POSTGRES_SCHEMA CASCADE" >/dev/null 2>&1 || true' EXIT
until curl -fs -o /dev/null "$COMPANION_URL/readyz"; do
	kill -0 "$pid" 2>/dev/null || { say "serve exited; see $dir/serve.log"; exit 1; }
	sleep 0.05
done
say "serve ready on $COMPANION_URL, schema $POSTGRES_SCHEMA"
# A service in use has a ledger that is not new: the first items of a new schema are planned each time
# (pgstore's customPlans) and fill an empty table. The warm-up's items are not measured.
say "warm-up: ${BENCH_WARM_ITEMS:-2000} items at 32 callers, not measured"
"$bin" bench --items "${BENCH_WARM_ITEMS:-2000}" --callers 32 >"$dir/warm-up.txt"

# run NAME ITEMS ARGS…: one bench, its output in $dir/NAME.txt, and the CPU per item of serve and PostgreSQL.
run() {
	local name=$1 n=$2
	shift 2
	local s0 p0 s1 p1
	say "$name: uptime $(uptime | sed 's/.*load average/load average/')"
	s0=$(cpu_of "$pid")
	p0=$(pg_cpu)
	"$bin" bench "$@" >"$dir/$name.txt"
	s1=$(cpu_of "$pid")
	p1=$(pg_cpu)
	cat "$dir/$name.txt"
	awk -v n="$n" -v s=$((s1 - s0)) -v p=$((p1 - p0)) -v t="$ticks" -v name="$name" 'BEGIN {
		printf "%s: CPU per item: service %.0f µs, PostgreSQL %.0f µs (%d items)\n\n", name, s / t / n * 1e6, p / t / n * 1e6, n }'
}

run floor-32 "$floor_items" --items 0 --floor postgres --floor-items "$floor_items" --callers 32
run single-32-floor "$items" --items "$items" --callers 32 --floor postgres --floor-items "$floor_items"
echo "(single-32-floor's PostgreSQL CPU includes the floor's $floor_items items: single-32 is measured alone below)"
echo
run single-32 "$items" --items "$items" --callers 32
run single-1 "$one_items" --items "$one_items" --callers 1
run batch-500 "$items" --mode batch --batch 500 --callers 1 --items "$items"
say "done; outputs in $dir"
