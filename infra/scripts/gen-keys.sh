#!/usr/bin/env bash
# Generate the secrets docker-compose.yml hands its services: one file per secret.
#
#   infra/scripts/gen-keys.sh [--demo] [DIR]        (DIR defaults to deploy/secrets)
#
# Writes DIR/<secret> for each entry of docker-compose.yml's `secrets:` (database
# passwords and URLs, cloud credentials, the two checkpoint tokens left empty), and
# deploy/config/{executor,agent}.env with the services' non-secret cloud settings.
#
# --demo points the agent and the executor at the compose devcloud, with fresh random
# devcloud keys (never the public dev defaults). Without it, the cloud credentials come
# from the environment: ALIBABA_READ_KEY_ID/ALIBABA_READ_KEY_SECRET (agent, read-only RAM
# user) and ALIBABA_WRITE_KEY_ID/ALIBABA_WRITE_KEY_SECRET (executor, see infra/ram/).
#
# Permissions, for a normal user as for root: DIR is 0700, so only its owner (and root)
# can reach a file in it, and each file is 0644, so that the services' users inside the
# containers (uid 10001, postgres's) can read the file compose bind-mounts: outside swarm
# compose ignores a secret's uid, gid and mode. Keep the files in DIR. The private keys
# are not made here: each is made inside its service's volume (see Next below).
#
# It never overwrites an existing file.
set -euo pipefail

demo=0
if [ "${1:-}" = "--demo" ]; then demo=1; shift; fi
dir=${1:-deploy/secrets}
deploy=$(dirname "$dir")
config=$deploy/config
public=$deploy/public
(umask 077 && mkdir -p "$dir")
chmod 700 "$dir"
(umask 022 && mkdir -p "$config" "$public")

rand() { openssl rand -hex 24; }
write() {  # write FILE CONTENT: refuse to overwrite, create 0644 (in a 0700 directory)
  if [ -e "$1" ]; then echo "keeping existing $1"; return; fi
  (umask 077 && printf '%s\n' "$2" >"$1")
  chmod 644 "$1"
  echo "wrote $1"
}
empty() {  # empty FILE: a secret filled in later, or never used; refuse to overwrite
  if [ -e "$1" ]; then echo "keeping existing $1"; return; fi
  (umask 077 && : >"$1")
  chmod 644 "$1"
  echo "wrote $1 (empty)"
}

cp_pw=$(rand)
ex_pw=$(rand)
write "$dir/postgres_password" "$(rand)"
write "$dir/checkpoint_db_password" "$cp_pw"
write "$dir/executor_db_password" "$ex_pw"
write "$dir/checkpoint_database_url" "postgresql://checkpoint:$cp_pw@postgres:5432/checkpoint"
write "$dir/executor_database_url" "postgresql://executor:$ex_pw@postgres:5432/executor"

if [ "$demo" = 1 ]; then
  read_id="LTAI$(openssl rand -hex 10)"; read_secret=$(rand)
  write_id="LTAI$(openssl rand -hex 10)"; write_secret=$(rand)
  write "$dir/devcloud_read_key_id" "$read_id"
  write "$dir/devcloud_read_key_secret" "$read_secret"
  write "$dir/devcloud_write_key_id" "$write_id"
  write "$dir/devcloud_write_key_secret" "$write_secret"
  executor_config="AIRLOCK_EXECUTOR_CLOUD_ENDPOINT=devcloud:8788
AIRLOCK_EXECUTOR_CLOUD_PROTOCOL=http"
  agent_config="AIRLOCK_AGENT_CLOUD_ENDPOINT=devcloud:8788
AIRLOCK_AGENT_CLOUD_PROTOCOL=http"
else
  read_id=${ALIBABA_READ_KEY_ID:?set ALIBABA_READ_KEY_ID (or use --demo)}
  read_secret=${ALIBABA_READ_KEY_SECRET:?set ALIBABA_READ_KEY_SECRET}
  write_id=${ALIBABA_WRITE_KEY_ID:?set ALIBABA_WRITE_KEY_ID}
  write_secret=${ALIBABA_WRITE_KEY_SECRET:?set ALIBABA_WRITE_KEY_SECRET}
  executor_config="# the SDK's regional endpoints over https"
  agent_config="# the SDK's regional endpoints over https"
  # Not used outside --demo, but compose (build, before 2.38.2) wants every secret file
  # there; empty, devcloud refuses to start (its read and write keys must differ).
  for name in read_key_id read_key_secret write_key_id write_key_secret; do
    empty "$dir/devcloud_$name"
  done
fi

write "$dir/executor_cloud_access_key_id" "$write_id"
write "$dir/executor_cloud_access_key_secret" "$write_secret"
write "$dir/agent_cloud_access_key_id" "$read_id"
write "$dir/agent_cloud_access_key_secret" "$read_secret"
empty "$dir/executor_checkpoint_token"
empty "$dir/agent_checkpoint_token"
write "$config/executor.env" "$executor_config"
write "$config/agent.env" "$agent_config"

cat <<NEXT

Next (see docs/operations.md, "Production deployment"), with AIRLOCK_AUDIENCE,
AIRLOCK_ACCOUNT and AIRLOCK_REGION exported:
  docker compose run --rm --no-deps -T executor executor keygen --public - > $public/receipt-keys.json
  docker compose run --rm checkpoint keys generate
  docker compose run --rm checkpoint keys export-public > $public/trusted-keys.json
  docker compose run --rm checkpoint tokens create executor --role executor > $dir/executor_checkpoint_token
  docker compose run --rm checkpoint tokens create agent --role agent > $dir/agent_checkpoint_token
NEXT
