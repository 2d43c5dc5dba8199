#!/usr/bin/env bash
# Create Airlock's two RAM users with the aliyun CLI and attach least-privilege policies:
#
#   airlock-agent-read      infra/ram/read-policy.json   (Describe*/metrics only)
#   airlock-executor-write  infra/ram/write-policy.json  (Stop/Delete on instances, and
#                           Describe; denied on anything tagged airlock:protect)
#
#   infra/scripts/setup-ram.sh [--dry-run] [--prefix NAME] [--account ID --regions R1,R2]
#
# --account and --regions scope the executor's writes to instances of that account in
# those regions (the ones its AIRLOCK_EXECUTOR_CLOUD_REGIONS names); without them the
# write policy covers every region of the account that owns the key, and a warning says so.
# --dry-run prints the aliyun commands instead of running them. The access keys that
# CreateAccessKey prints go to the agent (read) and the executor (write) only, e.g. via
# ALIBABA_READ_KEY_ID/... and infra/scripts/gen-keys.sh. Never give the write key to the
# agent, and never give either to the checkpoint or the web app.
set -euo pipefail

usage="usage: $0 [--dry-run] [--prefix NAME] [--account ID --regions R1,R2]"
dry=0
prefix=airlock
account=
regions=
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --prefix|--account|--regions)
      if [ $# -lt 2 ]; then echo "$1 needs a value; $usage" >&2; exit 2; fi
      case "$1" in
        --prefix) prefix=$2 ;;
        --account) account=$2 ;;
        --regions) regions=$2 ;;
      esac
      shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  shift
done
if ! [[ "$prefix" =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,40}$ ]]; then
  echo "--prefix must be letters, digits, '.', '_' and '-' (a RAM user name prefix)" >&2; exit 2
fi
if [ -n "$account$regions" ] && { [ -z "$account" ] || [ -z "$regions" ]; }; then
  echo "give --account and --regions together; $usage" >&2; exit 2
fi
if [ -n "$account" ] && ! [[ "$account" =~ ^[0-9]{1,32}$ ]]; then
  echo "--account must be the numeric Alibaba Cloud account id, got '$account'" >&2; exit 2
fi

here=$(cd "$(dirname "$0")/.." && pwd)

# The write policy, with its instance resources narrowed to the account and regions.
write_policy() {
  local policy ecs= rds= region
  policy=$(cat "$here/ram/write-policy.json")
  if [ -z "$account" ]; then
    printf '%s' "$policy"
    return
  fi
  IFS=, read -r -a list <<< "$regions"
  for region in "${list[@]}"; do
    if ! [[ "$region" =~ ^[a-z0-9]+(-[a-z0-9]+){1,5}$ ]]; then
      echo "--regions: '$region' is not a region id (e.g. ap-southeast-1)" >&2; return 2
    fi
    ecs+="${ecs:+, }\"acs:ecs:$region:$account:instance/*\""
    rds+="${rds:+, }\"acs:rds:$region:$account:dbinstance/*\""
  done
  policy=${policy//\"acs:ecs:\*:\*:instance\/\*\"/[$ecs]}
  policy=${policy//\"acs:rds:\*:\*:dbinstance\/\*\"/[$rds]}
  printf '%s' "$policy"
}
write=$(write_policy) || exit 2
if [ -z "$account" ]; then
  echo "warning: no --account/--regions: the executor may stop and delete instances in every" \
    "region of the account that owns its key" >&2
fi
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

setup() {  # setup USER POLICY_NAME POLICY_DOCUMENT
  run aliyun ram CreateUser --UserName "$1" --DisplayName "$1"
  run aliyun ram CreatePolicy --PolicyName "$2" --PolicyDocument "$3" \
    --Description "Airlock least privilege for $1"
  run aliyun ram AttachPolicyToUser --PolicyType Custom --PolicyName "$2" --UserName "$1"
  run aliyun ram CreateAccessKey --UserName "$1"
}

setup "$prefix-agent-read" "${prefix^}AgentRead" "$(cat "$here/ram/read-policy.json")"
setup "$prefix-executor-write" "${prefix^}ExecutorWrite" "$write"
