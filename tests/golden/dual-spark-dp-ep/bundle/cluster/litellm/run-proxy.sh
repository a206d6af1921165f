#!/bin/sh
# dual-spark-dp-ep: start the LiteLLM proxy on the head (ai1).
# Rendered by `deskside render` from dual-spark-dp-ep.yaml.
# Usage: run-proxy.sh MASTER_KEY_FILE KEYS_FILE LITELLM [ARG...]
# The keys are read from their files here: they are in no rendered file and on no
# command line. KEYS_FILE holds the engines' keys (NAME=value lines).
set -eu
if [ $# -lt 3 ]; then
  echo 'usage: run-proxy.sh MASTER_KEY_FILE KEYS_FILE LITELLM [ARG...]' >&2
  exit 2
fi
key_file=$1; keys_file=$2; shift 2
for f in "$key_file" "$keys_file"; do
  if [ ! -r "$f" ]; then
    printf 'deskside: key file %s is missing or unreadable\n' "$f" >&2
    exit 1
  fi
done
LITELLM_MASTER_KEY=$(cat "$key_file")
export LITELLM_MASTER_KEY
set -a
# shellcheck source=/dev/null
. "$keys_file"
set +a
# no network at start-up: use the cost map bundled with LiteLLM
export LITELLM_LOCAL_MODEL_COST_MAP=True
exec "$@"
