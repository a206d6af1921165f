#!/bin/sh
# local-replicas-b: the vLLM engine of node rep-b0 (head, node rank 0).
# Rendered by `deskside render` from local-replicas.yaml.
# Change the recipe and render again rather than editing this file.
# Every value is quoted for POSIX sh: recipe values are literal on purpose, so shellcheck's
# "does not expand in quotes" notes do not apply.
# shellcheck disable=SC1003,SC2016,SC2088
set -eu

# Environment: deskside's runtime defaults, then the node's launch environment (fabric,
# NCCL/Gloo, the recipe's engine.env). node.env holds the same values for Compose.
export GLOO_SOCKET_IFNAME=ds-rvb0
export HF_HOME=/var/lib/deskside/hf-cache
export HF_HUB_OFFLINE=1
export NCCL_IB_DISABLE=1
export NCCL_NET=Socket
export NCCL_SOCKET_IFNAME=ds-rvb0
export VLLM_HOST_IP=10.79.1.1
export VLLM_TARGET_DEVICE=cpu

# deskside's run tag (recipe/node/start time/engine): how `deskside node exporter` finds
# this engine among the node's processes. A start by deskside itself passes its own; a start
# by systemd or Docker gets this start's time.
if [ -z "${DESKSIDE_RUN:-}" ]; then
  DESKSIDE_RUN=local-replicas-b/rep-b0/"$(date -u +%Y%m%d%H%M%S)/engine"
  export DESKSIDE_RUN
fi

# The engine's API key: a proxy fronts this engine, so its API answers /v1 only with the
# key. The key is read from its 0600 file (a container gets it from Compose's env_file);
# it is in no rendered file and on no command line.
if [ -z "${VLLM_API_KEY:-}" ]; then
  key_env=/opt/deskside/local-replicas-b/secrets/engine.env
  if [ ! -r "$key_env" ]; then
    printf 'deskside: the engine key file %s is missing or unreadable\n' "$key_env" >&2
    exit 1
  fi
  set -a
  # shellcheck source=/dev/null
  . "$key_env"
  set +a
fi
if [ -z "${VLLM_API_KEY:-}" ]; then
  printf 'deskside: no VLLM_API_KEY: the engine would take requests without a key\n' >&2
  exit 1
fi

exec python3 -m deskside.engine.cpu serve /opt/deskside/local-replicas-b/models/tiny-llama \
  --served-model-name llama-tiny tiny-replicas \
  --tensor-parallel-size 2 \
  --pipeline-parallel-size 1 \
  --distributed-executor-backend mp \
  --load-format dummy \
  --max-model-len 4096 \
  --max-num-batched-tokens 4096 \
  --max-num-seqs 6 \
  --kv-cache-memory-bytes 536870912 \
  --enable-prefix-caching \
  --enable-chunked-prefill \
  --enforce-eager \
  --nnodes 2 \
  --node-rank 0 \
  --master-addr 10.79.1.1 \
  --master-port 25000 \
  --host 10.79.1.1 \
  --port 8888 \
  --enable-server-load-tracking
