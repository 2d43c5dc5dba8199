#!/usr/bin/env bash
# Runs once, on an empty data directory (docker-entrypoint-initdb.d). The checkpoint and
# the executor get separate databases owned by separate roles, and neither role may
# connect to the other's database: the executor's ledger alone decides whether an
# approval was used, and the checkpoint must not be able to touch it.
# The two roles' passwords come from compose secrets (files), never the environment.
set -euo pipefail
cp_pw=$(<"${AIRLOCK_CHECKPOINT_DB_PASSWORD_FILE:?}")
ex_pw=$(<"${AIRLOCK_EXECUTOR_DB_PASSWORD_FILE:?}")
: "${cp_pw:?empty checkpoint database password}" "${ex_pw:?empty executor database password}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  --set=cp_pw="$cp_pw" --set=ex_pw="$ex_pw" <<'SQL'
CREATE ROLE checkpoint LOGIN PASSWORD :'cp_pw';
CREATE ROLE executor LOGIN PASSWORD :'ex_pw';
CREATE DATABASE checkpoint OWNER checkpoint;
CREATE DATABASE executor OWNER executor;
REVOKE ALL ON DATABASE checkpoint FROM PUBLIC;
REVOKE ALL ON DATABASE executor FROM PUBLIC;
SQL
