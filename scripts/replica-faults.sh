#!/usr/bin/env bash
# The replica fault test (cmd/replicafaults) against a PostgreSQL cluster of its own: initdb in a
# temporary directory, started on a free loopback port, crash-stopped (pg_ctl stop -m immediate) and
# started again every FAULTS_DB_CRASH_EVERY while three `companion serve` replicas share it and one of
# them is SIGKILLed every FAULTS_KILL_EVERY. Its own cluster, so that crashing it disturbs nothing else.
#
#   bash scripts/replica-faults.sh                      # one minute (what .ci/run runs)
#   FAULTS_DURATION=2h bash scripts/replica-faults.sh   # as long as you like
#
# With COMPANION_TEST_MONGODB_URI naming a real MongoDB replica set, it runs the same test against it
# afterwards (without crashing it: give FAULTS_MONGODB_STOP and FAULTS_MONGODB_START, shell commands,
# to crash it too). Needs Debian's postgresql (scripts/postgres-test.sh installs it) and the Go
# toolchain. Exits non-zero when a promise was broken; the replicas' logs are then kept and named.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
duration="${FAULTS_DURATION:-60s}"
kill_every="${FAULTS_KILL_EVERY:-1s}"
crash_every="${FAULTS_DB_CRASH_EVERY:-5s}"

pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [[ -z $pgbin ]]; then
	bash "$root/scripts/postgres-test.sh" >/dev/null
	pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/replica-faults.XXXXXX")
chmod 755 "$work"
data="$work/pgdata"
mkdir "$data"
# initdb refuses to run as root: as root the cluster belongs to the postgres user.
as_pg=""
if [[ $(id -u) == 0 ]]; then
	chown postgres: "$data"
	as_pg="runuser -u postgres --"
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pgctl="$as_pg $pgbin/pg_ctl -D $data"
cleanup() {
	$pgctl stop -m immediate >/dev/null 2>&1 || true
	if [[ ${keep:-} != 1 ]]; then rm -rf "$work"; fi
}
trap cleanup EXIT

$as_pg "$pgbin/initdb" -D "$data" -U companion --auth=trust -E UTF8 --no-instructions >"$work/initdb.log"
# fsync and synchronous_commit stay on (the defaults): a crash-stop must lose nothing acknowledged.
start="$pgctl -w -t 60 -l $data/server.log -o '-p $port -k $data -c listen_addresses=127.0.0.1' start"
eval "$start" >/dev/null
echo "PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}') of this run on 127.0.0.1:$port ($data)"

if [[ -n ${FAULTS_COMPANION:-} ]]; then cp "$FAULTS_COMPANION" "$work/companion"; else (cd "$root" && go build -o "$work/companion" ./cmd/companion); fi
(cd "$root" && go build -o "$work/replicafaults" ./cmd/replicafaults)

status=0
"$work/replicafaults" --companion "$work/companion" --work-dir "$work/run-postgres" \
	--postgres "postgres://companion@127.0.0.1:$port/postgres?sslmode=disable" \
	--duration "$duration" --kill-every "$kill_every" --db-crash-every "$crash_every" \
	--db-stop "$pgctl stop -m immediate" --db-start "$start" || status=$?

if [[ -n ${COMPANION_TEST_MONGODB_URI:-} ]]; then
	mongo_faults=()
	if [[ -n ${FAULTS_MONGODB_STOP:-} ]]; then
		mongo_faults=(--db-crash-every "$crash_every" --db-stop "$FAULTS_MONGODB_STOP" --db-start "$FAULTS_MONGODB_START")
	fi
	"$work/replicafaults" --companion "$work/companion" --work-dir "$work/run-mongodb" \
		--mongodb "$COMPANION_TEST_MONGODB_URI" --duration "$duration" --kill-every "$kill_every" \
		"${mongo_faults[@]}" || status=$?
else
	echo "MongoDB: not run (COMPANION_TEST_MONGODB_URI names no real replica set)"
fi
if [[ $status != 0 ]]; then
	keep=1
	echo "replica fault test FAILED; logs kept in $work"
fi
exit "$status"
