#!/usr/bin/env bash
# Generate per-service secrets for docker-compose.yml: one env file per service (mode
# 0600), the executor's receipt key, and the receipt public key set the checkpoint trusts.
#
#   infra/scripts/gen-keys.sh [--demo] [DIR]        (DIR defaults to deploy/secrets)
#
# --demo points the agent and the executor at the compose devcloud, with fresh random
# devcloud keys (never the public dev defaults). Without it, the cloud credentials come
# from the environment: ALIBABA_READ_KEY_ID/ALIBABA_READ_KEY_SECRET (agent, read-only RAM
# user) and ALIBABA_WRITE_KEY_ID/ALIBABA_WRITE_KEY_SECRET (executor, see infra/ram/).
#
# It never overwrites an existing file. Service tokens and the approval signing key are
# made afterwards, inside the running checkpoint (see docs/operations.md, "Production deployment").
set -euo pipefail
umask 077

demo=0
if [ "${1:-}" = "--demo" ]; then demo=1; shift; fi
dir=${1:-deploy/secrets}
public=$(dirname "$dir")/public
mkdir -p "$dir"
# Public material (the receipt public key set) is readable by the containers' user.
(umask 022 && mkdir -p "$public")

rand() { openssl rand -hex 24; }
write() {  # write FILE CONTENT: refuse to overwrite, create 0600
  if [ -e "$1" ]; then echo "keeping existing $1"; return; fi
  printf '%s\n' "$2" >"$1"
  chmod 600 "$1"
  echo "wrote $1"
}

cp_pw=$(rand)
ex_pw=$(rand)
write "$dir/postgres.env" "POSTGRES_PASSWORD=$(rand)
AIRLOCK_CHECKPOINT_DB_PASSWORD=$cp_pw
AIRLOCK_EXECUTOR_DB_PASSWORD=$ex_pw"

write "$dir/checkpoint.env" \
  "AIRLOCK_CHECKPOINT_DATABASE_URL=postgresql://checkpoint:$cp_pw@postgres:5432/checkpoint"

if [ "$demo" = 1 ]; then
  read_id="LTAI$(openssl rand -hex 10)"; read_secret=$(rand)
  write_id="LTAI$(openssl rand -hex 10)"; write_secret=$(rand)
  endpoint="AIRLOCK_EXECUTOR_CLOUD_ENDPOINT=devcloud:8788
AIRLOCK_EXECUTOR_CLOUD_PROTOCOL=http"
  agent_endpoint="AIRLOCK_AGENT_CLOUD_ENDPOINT=devcloud:8788
AIRLOCK_AGENT_CLOUD_PROTOCOL=http"
  write "$dir/devcloud.env" "AIRLOCK_DEVCLOUD_READ_KEY_ID=$read_id
AIRLOCK_DEVCLOUD_READ_KEY_SECRET=$read_secret
AIRLOCK_DEVCLOUD_WRITE_KEY_ID=$write_id
AIRLOCK_DEVCLOUD_WRITE_KEY_SECRET=$write_secret"
else
  read_id=${ALIBABA_READ_KEY_ID:?set ALIBABA_READ_KEY_ID (or use --demo)}
  read_secret=${ALIBABA_READ_KEY_SECRET:?set ALIBABA_READ_KEY_SECRET}
  write_id=${ALIBABA_WRITE_KEY_ID:?set ALIBABA_WRITE_KEY_ID}
  write_secret=${ALIBABA_WRITE_KEY_SECRET:?set ALIBABA_WRITE_KEY_SECRET}
  endpoint=""
  agent_endpoint=""
  # compose still names the demo profile's env file; keep it empty outside the demo.
  write "$dir/devcloud.env" "# devcloud is not used outside --demo"
fi

write "$dir/executor.env" "AIRLOCK_EXECUTOR_DATABASE_URL=postgresql://executor:$ex_pw@postgres:5432/executor
AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_ID=$write_id
AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_SECRET=$write_secret
$endpoint"

write "$dir/agent.env" "AIRLOCK_AGENT_CLOUD_ACCESS_KEY_ID=$read_id
AIRLOCK_AGENT_CLOUD_ACCESS_KEY_SECRET=$read_secret
$agent_endpoint"

key="$dir/executor-receipt.pem"
if [ ! -e "$key" ]; then
  openssl genpkey -algorithm ed25519 -out "$key"
  chmod 600 "$key"
  echo "wrote $key"
fi
# The receipt public key set the checkpoint uses to verify reported outcomes; the
# checkpoint refuses to start without it (AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH).
der=$(openssl pkey -in "$key" -pubout -outform DER | tail -c 32 | base64)
kid="ed25519:$(openssl pkey -in "$key" -pubout -outform DER | tail -c 32 \
  | openssl dgst -sha256 -hex | awk '{print $NF}' | cut -c1-32)"
umask 022
printf '{"keys": [{"kid": "%s", "public_key": "%s", "status": "active"}]}\n' "$kid" "$der" \
  >"$public/receipt-keys.json"
echo "wrote $public/receipt-keys.json"

# The containers run as uid 10001; compose mounts secret files as they are on the host.
if [ "$(id -u)" = 0 ]; then chown 10001:10001 "$key"; fi
cat <<NEXT

Next (see docs/operations.md, "Production deployment"):
  docker compose run --rm checkpoint keys generate
  docker compose run --rm checkpoint keys export-public > $public/trusted-keys.json
  docker compose run --rm checkpoint tokens create executor --role executor   # -> AIRLOCK_EXECUTOR_CHECKPOINT_TOKEN in $dir/executor.env
  docker compose run --rm checkpoint tokens create agent --role agent         # -> AIRLOCK_AGENT_CHECKPOINT_TOKEN in $dir/agent.env
NEXT
