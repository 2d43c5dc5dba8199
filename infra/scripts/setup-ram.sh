#!/usr/bin/env bash
# Create Airlock's two RAM users with the aliyun CLI and attach least-privilege policies:
#
#   airlock-agent-read      infra/ram/read-policy.json   (Describe*/metrics only)
#   airlock-executor-write  infra/ram/write-policy.json  (Stop/Delete on instances, and
#                           Describe; denied on anything tagged airlock:protect)
#
#   infra/scripts/setup-ram.sh [--dry-run] [--prefix NAME]
#
# --dry-run prints the aliyun commands instead of running them. The access keys that
# CreateAccessKey prints go to the agent (read) and the executor (write) only, e.g. via
# ALIBABA_READ_KEY_ID/... and infra/scripts/gen-keys.sh. Never give the write key to the
# agent, and never give either to the checkpoint or the web app.
set -euo pipefail

dry=0
prefix=airlock
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --prefix) prefix=$2; shift ;;
    *) echo "usage: $0 [--dry-run] [--prefix NAME]" >&2; exit 2 ;;
  esac
  shift
done

here=$(cd "$(dirname "$0")/.." && pwd)
run() {
  if [ "$dry" = 1 ]; then
    printf '%q ' "$@"; printf '\n'
  else
    "$@"
  fi
}
if [ "$dry" = 0 ] && ! command -v aliyun >/dev/null 2>&1; then
  echo "the aliyun CLI is not installed (https://github.com/aliyun/aliyun-cli); try --dry-run" >&2
  exit 2
fi

setup() {  # setup USER POLICY_NAME POLICY_FILE
  run aliyun ram CreateUser --UserName "$1" --DisplayName "$1"
  run aliyun ram CreatePolicy --PolicyName "$2" --PolicyDocument "$(cat "$3")" \
    --Description "Airlock least privilege for $1"
  run aliyun ram AttachPolicyToUser --PolicyType Custom --PolicyName "$2" --UserName "$1"
  run aliyun ram CreateAccessKey --UserName "$1"
}

setup "$prefix-agent-read" "${prefix^}AgentRead" "$here/ram/read-policy.json"
setup "$prefix-executor-write" "${prefix^}ExecutorWrite" "$here/ram/write-policy.json"
