#!/bin/bash
# PostgreSQL's first start (docker-entrypoint-initdb.d): n8n-hosting's init-data.sh, then companion's
# part. companion gets a role of its own that owns one schema and has no right outside it: n8n's tables
# stay out of its reach, and its ledger out of n8n's.
set -e;


if [ -n "${POSTGRES_NON_ROOT_USER:-}" ] && [ -n "${POSTGRES_NON_ROOT_PASSWORD:-}" ]; then
	psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<-EOSQL
		CREATE USER ${POSTGRES_NON_ROOT_USER} WITH PASSWORD '${POSTGRES_NON_ROOT_PASSWORD}';
		GRANT ALL PRIVILEGES ON DATABASE ${POSTGRES_DB} TO ${POSTGRES_NON_ROOT_USER};
		GRANT CREATE ON SCHEMA public TO ${POSTGRES_NON_ROOT_USER};
	EOSQL
else
	echo "SETUP INFO: No Environment variables given!"
fi

# companion: POSTGRES_SCHEMA of the service (companion by default) is this schema.
if [ -n "${COMPANION_POSTGRES_USER:-}" ] && [ -n "${COMPANION_POSTGRES_PASSWORD:-}" ]; then
	psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
		-v role="${COMPANION_POSTGRES_USER}" -v password="${COMPANION_POSTGRES_PASSWORD}" \
		-v schema="${COMPANION_POSTGRES_SCHEMA:-companion}" -v db="${POSTGRES_DB}" <<-'EOSQL'
		CREATE ROLE :"role" LOGIN PASSWORD :'password';
		GRANT CONNECT ON DATABASE :"db" TO :"role";
		CREATE SCHEMA :"schema" AUTHORIZATION :"role";
		ALTER ROLE :"role" IN DATABASE :"db" SET search_path = :"schema";
	EOSQL
else
	echo "SETUP INFO: COMPANION_POSTGRES_USER and COMPANION_POSTGRES_PASSWORD not given: no role for companion"
fi
