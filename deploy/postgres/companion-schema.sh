#!/bin/bash
# companion's role and schema in n8n's PostgreSQL, beside n8n-hosting's init-data.sh: run by the postgres
# image at the database's first start (docker-entrypoint-initdb.d), or once by hand in a database that
# exists already (deploy/README.md). The role owns one schema (POSTGRES_SCHEMA of the service, companion
# by default), finds it first on its search_path, and has no right on n8n's tables; n8n's role has none
# on the ledger.
set -e

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
