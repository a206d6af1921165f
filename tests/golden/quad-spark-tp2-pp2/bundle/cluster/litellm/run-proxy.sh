#!/bin/sh
# quad-spark-tp2-pp2: start the LiteLLM proxy on the head (ai1).
# Rendered by `deskside render` from quad-spark-tp2-pp2.yaml.
# The master key is read from its file here: it is in no rendered file and on no
# command line.
# Recipe values are literal on purpose:
# shellcheck disable=SC1003,SC2016,SC2088
set -eu
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
key_file=/opt/deskside/quad-spark-tp2-pp2/secrets/proxy-master-key
if [ ! -r "$key_file" ]; then
  printf 'deskside: proxy master key file %s is missing or unreadable\n' "$key_file" >&2
  exit 1
fi
LITELLM_MASTER_KEY=$(cat "$key_file")
export LITELLM_MASTER_KEY
# the engine's own key, which the proxy sends to it
engine_env=/opt/deskside/quad-spark-tp2-pp2/secrets/engine.env
if [ ! -r "$engine_env" ]; then
  printf 'deskside: the engine key file %s is missing or unreadable\n' "$engine_env" >&2
  exit 1
fi
set -a
# shellcheck source=/dev/null
. "$engine_env"
set +a
# no network at start-up: use the cost map bundled with LiteLLM
export LITELLM_LOCAL_MODEL_COST_MAP=True
# the LiteLLM program: the recipe's, or the first argument (the proxy's container
# runs the one in its image)
litellm=/opt/litellm/bin/litellm
if [ $# -gt 0 ]; then litellm=$1; fi
exec "$litellm" --config "$here/config.yaml" --host 192.168.0.27 --port 4000
