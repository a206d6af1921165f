#!/bin/sh
# local-tiny: the vLLM engine of node node1 (worker, node rank 1).
# Rendered by `deskside render` from local-tiny.yaml.
# Change the recipe and render again rather than editing this file.
# Every value is quoted for POSIX sh: recipe values are literal on purpose, so shellcheck's
# "does not expand in quotes" notes do not apply.
# shellcheck disable=SC1003,SC2016,SC2088
set -eu

# Environment: deskside's runtime defaults, then the node's launch environment (fabric,
# NCCL/Gloo, the recipe's engine.env). node.env holds the same values for Compose.
export GLOO_SOCKET_IFNAME=ds-veth1
export HF_HOME=/var/lib/deskside/hf-cache
export HF_HUB_OFFLINE=1
export NCCL_IB_DISABLE=1
export NCCL_NET=Socket
export NCCL_SOCKET_IFNAME=ds-veth1
export VLLM_HOST_IP=10.77.0.2
export VLLM_TARGET_DEVICE=cpu

# deskside's run tag (recipe/node/start time/engine): how `deskside node exporter` finds
# this engine among the node's processes. A start by deskside itself passes its own; a start
# by systemd or Docker gets this start's time.
if [ -z "${DESKSIDE_RUN:-}" ]; then
  DESKSIDE_RUN=local-tiny/node1/"$(date -u +%Y%m%d%H%M%S)/engine"
  export DESKSIDE_RUN
fi

exec python3 -m deskside.engine.cpu serve /opt/deskside/local-tiny/models/tiny-deepseek-v3 \
  --served-model-name deepseek-v4-flash-tiny tiny \
  --tensor-parallel-size 2 \
  --pipeline-parallel-size 1 \
  --distributed-executor-backend mp \
  --load-format dummy \
  --max-model-len 4096 \
  --max-num-batched-tokens 4096 \
  --max-num-seqs 6 \
  --kv-cache-memory-bytes 1073741824 \
  --speculative-config '{"method":"mtp","num_speculative_tokens":3}' \
  --enable-prefix-caching \
  --enable-chunked-prefill \
  --enforce-eager \
  --nnodes 2 \
  --node-rank 1 \
  --master-addr 10.77.0.1 \
  --master-port 25000 \
  --headless
