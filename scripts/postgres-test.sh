#!/usr/bin/env bash
# Starts the PostgreSQL the tests use and prints its URL, the value of COMPANION_TEST_POSTGRES_URL, as the
# last line of standard output (everything else goes to standard error):
#
#   export COMPANION_TEST_POSTGRES_URL="$(bash scripts/postgres-test.sh)"
#
# It installs Debian's postgresql when it is missing (apt-get, non-interactive), creates the cluster
# "main" of the installed version when there is none, starts it (pg_ctlcluster VERSION main start), and
# creates the role and the database the tests use, companion_test, owned by that role (each test works
# in a schema of its own inside it, dropped at its end). Idempotent: on a machine where all of that is
# done it only prints the URL. Needs root (or sudo) and Debian's postgresql-common tools.
set -euo pipefail

role=companion_test
database=companion_test
password=companion_test

say() { echo "postgres-test: $*" >&2; }

as_root=()
if [[ $(id -u) -ne 0 ]]; then
	if ! command -v sudo >/dev/null 2>&1; then
		say "this is neither root nor has sudo; run it as root (it installs and starts PostgreSQL)"
		exit 1
	fi
	as_root=(sudo)
fi

if ! command -v pg_lsclusters >/dev/null 2>&1 || [[ -z $(ls /usr/lib/postgresql 2>/dev/null) ]]; then
	say "installing Debian's postgresql"
	export DEBIAN_FRONTEND=noninteractive
	"${as_root[@]}" apt-get update >&2
	"${as_root[@]}" apt-get install -y --no-install-recommends postgresql >&2
fi

# The cluster "main" of the newest installed version; pg_lsclusters -h prints "version name port status …".
version=$(pg_lsclusters -h | awk '$2 == "main" {print $1}' | sort -V | tail -n 1)
if [[ -z $version ]]; then
	version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
	say "creating the cluster $version/main"
	"${as_root[@]}" pg_createcluster "$version" main >&2
fi
port=$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $3}')
if ! pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $4}' | grep -q '^online'; then
	say "starting the cluster $version/main on port $port"
	# Another process may start it at the same moment: its start failing then is no failure.
	if ! "${as_root[@]}" pg_ctlcluster "$version" main start >&2; then
		pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $4}' | grep -q '^online'
	fi
fi

psql_postgres() {
	if [[ $(id -u) -eq 0 ]]; then
		runuser -u postgres -- psql -p "$port" -X -q -v ON_ERROR_STOP=1 "$@"
	else
		sudo -u postgres psql -p "$port" -X -q -v ON_ERROR_STOP=1 "$@"
	fi
}

# The server accepts connections a moment after pg_ctlcluster returns on a slow machine.
for _ in $(seq 1 50); do
	if psql_postgres -c 'SELECT 1' >/dev/null 2>&1; then
		break
	fi
	sleep 0.2
done

if [[ $(psql_postgres -tA -c "SELECT count(*) FROM pg_roles WHERE rolname = '$role'") == 0 ]]; then
	say "creating the role $role"
	psql_postgres -c "CREATE ROLE $role LOGIN PASSWORD '$password'" >&2
fi
if [[ $(psql_postgres -tA -c "SELECT count(*) FROM pg_database WHERE datname = '$database'") == 0 ]]; then
	say "creating the database $database"
	psql_postgres -c "CREATE DATABASE $database OWNER $role" >&2
fi

echo "postgres://$role:$password@127.0.0.1:$port/$database?sslmode=disable"
