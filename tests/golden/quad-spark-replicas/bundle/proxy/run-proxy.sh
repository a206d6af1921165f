#!/bin/sh
# quad-spark-replicas: start the LiteLLM proxy in front of every replica group.
# Rendered by `deskside render` from quad-spark-replicas.yaml.
# Usage: run-proxy.sh MASTER_KEY_FILE ENGINES_ENV_FILE [LITELLM]
# The keys are read from their files here: they are in no rendered file and on no
# command line. ENGINES_ENV_FILE holds every group's engine key.
# shellcheck disable=SC1003,SC2016,SC2088
set -eu
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
if [ $# -lt 2 ]; then
  echo 'usage: run-proxy.sh MASTER_KEY_FILE ENGINES_ENV_FILE [LITELLM]' >&2
  exit 2
fi
key_file=$1; engines_env=$2
for f in "$key_file" "$engines_env"; do
  if [ ! -r "$f" ]; then
    printf 'deskside: key file %s is missing or unreadable\n' "$f" >&2
    exit 1
  fi
done
LITELLM_MASTER_KEY=$(cat "$key_file")
export LITELLM_MASTER_KEY
set -a
# shellcheck source=/dev/null
. "$engines_env"
set +a
# no network at start-up: use the cost map bundled with LiteLLM
export LITELLM_LOCAL_MODEL_COST_MAP=True
litellm=/opt/litellm/bin/litellm
if [ $# -gt 2 ]; then litellm=$3; fi
exec "$litellm" --config "$here/config.yaml" --host 192.168.0.27 --port 4000
