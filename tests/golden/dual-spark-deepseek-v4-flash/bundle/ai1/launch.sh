#!/bin/sh
# dual-spark-deepseek-v4-flash: the vLLM engine of node ai1 (head, node rank 0).
# Rendered by `deskside render` from dual-spark-deepseek-v4-flash.yaml.
# Change the recipe and render again rather than editing this file.
# Every value is quoted for POSIX sh: recipe values are literal on purpose, so shellcheck's
# "does not expand in quotes" notes do not apply.
# shellcheck disable=SC1003,SC2016,SC2088
set -eu

# Environment: deskside's runtime defaults, then the node's launch environment (fabric,
# NCCL/Gloo, the recipe's engine.env). node.env holds the same values for Compose.
export DEFAULT_THINKING=max
export DSPARK_SUPPRESS_STOPS_IN_REASONING=1
export FLASHINFER_WORKSPACE_BASE=/var/lib/deskside/hf-cache/flashinfer
export GLOO_SOCKET_IFNAME=enp1s0f0np0
export HF_HOME=/var/lib/deskside/hf-cache
export HF_HUB_OFFLINE=1
export NCCL_IB_ADDR_FAMILY=AF_INET
export NCCL_IB_DISABLE=0
export NCCL_IB_HCA='=rocep1s0f0'
export NCCL_IB_ROCE_VERSION_NUM=2
export NCCL_IGNORE_CPU_AFFINITY=1
export NCCL_NET=IB
export NCCL_SOCKET_IFNAME=enp1s0f0np0
export VLLM_CACHE_ROOT=/var/lib/deskside/hf-cache/vllm
export VLLM_HOST_IP=192.168.100.1
export VLLM_USE_BREAKABLE_CUDAGRAPH=0

# deskside's run tag (recipe/node/start time/engine): how `deskside node exporter` finds
# this engine among the node's processes. A start by deskside itself passes its own; a start
# by systemd or Docker gets this start's time.
if [ -z "${DESKSIDE_RUN:-}" ]; then
  DESKSIDE_RUN=dual-spark-deepseek-v4-flash/ai1/"$(date -u +%Y%m%d%H%M%S)/engine"
  export DESKSIDE_RUN
fi

# The engine's API key: a proxy fronts this engine, so its API answers /v1 only with the
# key. The key is read from its 0600 file (a container gets it from Compose's env_file);
# it is in no rendered file and on no command line.
if [ -z "${VLLM_API_KEY:-}" ]; then
  key_env=/opt/deskside/dual-spark-deepseek-v4-flash/secrets/engine.env
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

# RoCE: resolve NCCL_IB_GID_INDEX from this node's sysfs at every start, since
# GID indexes drift after reboots and address changes. Fails closed: never an empty index.
deskside_read() {
  _ds_v=
  { IFS=' 	' read -r _ds_v < "$1"; } 2>/dev/null || :
}
deskside_gid_index() {
  # usage: deskside_gid_index WANTED_GID NETDEV HCA[:PORT]...; prints the index
  _ds_root=${DESKSIDE_SYSFS_ROOT:-/sys}
  _ds_want=$1
  _ds_ndev=$2
  shift 2
  _ds_chosen=
  _ds_where=
  if [ "$#" -eq 0 ]; then
    echo "deskside: no_hcas: no RDMA devices listed for this node" >&2
    return 1
  fi
  for _ds_hca in "$@"; do
    _ds_dev=${_ds_hca%%:*}
    _ds_base=$_ds_root/class/infiniband/$_ds_dev
    if [ ! -d "$_ds_base" ]; then
      echo "deskside: no_device: RDMA device $_ds_dev not found in $_ds_root/class/infiniband" >&2
      return 1
    fi
    if [ "$_ds_dev" != "$_ds_hca" ]; then
      _ds_ports=${_ds_hca#*:}
      if [ ! -d "$_ds_base/ports/$_ds_ports" ]; then
        echo "deskside: no_port: $_ds_dev has no port $_ds_ports" >&2
        return 1
      fi
    else
      _ds_ports=
      for _ds_p in "$_ds_base"/ports/*; do
        [ -d "$_ds_p" ] || continue
        _ds_pn=${_ds_p##*/}
        case $_ds_pn in ''|*[!0-9]*) continue ;; esac
        _ds_ports="$_ds_ports $_ds_pn"
      done
      if [ -z "$_ds_ports" ]; then
        echo "deskside: no_port: $_ds_dev has no ports" >&2
        return 1
      fi
    fi
    for _ds_pn in $_ds_ports; do
      _ds_p=$_ds_base/ports/$_ds_pn
      deskside_read "$_ds_p/state"
      _ds_state=$_ds_v
      _ds_s=${_ds_state#*:}
      _ds_s=${_ds_s#"${_ds_s%%[! 	]*}"}
      if [ "$_ds_s" != ACTIVE ]; then
        echo "deskside: port_down: $_ds_dev port $_ds_pn is not ACTIVE" \
          "(state: ${_ds_state:-unreadable})" >&2
        return 1
      fi
      _ds_n=0
      _ds_idx=
      _ds_found=
      for _ds_g in "$_ds_p"/gids/*; do
        [ -f "$_ds_g" ] || continue
        _ds_i=${_ds_g##*/}
        case $_ds_i in ''|*[!0-9]*) continue ;; esac
        [ -r "$_ds_g" ] || continue
        deskside_read "$_ds_g"
        _ds_gid=$_ds_v
        case $_ds_gid in *[A-F]*) _ds_gid=$(printf '%s' "$_ds_gid" | tr 'A-F' 'a-f') ;; esac
        [ "$_ds_gid" = 0000:0000:0000:0000:0000:0000:0000:0000 ] && continue
        deskside_read "$_ds_p/gid_attrs/types/$_ds_i"
        _ds_type=$_ds_v
        deskside_read "$_ds_p/gid_attrs/ndevs/$_ds_i"
        _ds_nd=$_ds_v
        _ds_found="$_ds_found
  [$_ds_i] ${_ds_gid:-(empty)} ${_ds_type:-type unreadable} on ${_ds_nd:-netdev unreadable}"
        if [ "$_ds_gid" = "$_ds_want" ] && [ "$_ds_type" = "RoCE v2" ] \
          && [ "$_ds_nd" = "$_ds_ndev" ]; then
          _ds_n=$((_ds_n + 1))
          _ds_idx="$_ds_idx $_ds_i"
        fi
      done
      _ds_idx=${_ds_idx# }
      if [ "$_ds_n" -eq 0 ]; then
        echo "deskside: not_found: $_ds_dev port $_ds_pn: no RoCE v2 GID $_ds_want" \
          "on $_ds_ndev; found:${_ds_found:- nothing}" >&2
        return 1
      fi
      if [ "$_ds_n" -gt 1 ]; then
        echo "deskside: ambiguous: $_ds_dev port $_ds_pn: $_ds_n RoCE v2 GIDs" \
          "$_ds_want on $_ds_ndev (indexes $_ds_idx); found:$_ds_found" >&2
        return 1
      fi
      if [ -z "$_ds_chosen" ]; then
        _ds_chosen=$_ds_idx
        _ds_where="$_ds_dev:$_ds_pn"
      elif [ "$_ds_chosen" != "$_ds_idx" ]; then
        echo "deskside: disagree: $_ds_where needs GID index $_ds_chosen," \
          "$_ds_dev:$_ds_pn needs $_ds_idx; NCCL_IB_GID_INDEX is one number" >&2
        return 1
      fi
    done
  done
  printf '%s\n' "$_ds_chosen"
}
# NCCL_IB_GID_INDEX: the RoCE v2 GID of 192.168.100.1 on enp1s0f0np0, read from sysfs now
NCCL_IB_GID_INDEX=$(deskside_gid_index 0000:0000:0000:0000:0000:ffff:c0a8:6401 enp1s0f0np0 rocep1s0f0) || {
  echo "deskside: refusing to start: NCCL_IB_GID_INDEX could not be resolved (an empty index would select GID 0, a link-local address, and NCCL would hang)" >&2
  exit 1
}
case $NCCL_IB_GID_INDEX in
  ''|*[!0-9]*)
    echo "deskside: refusing to start: bad NCCL_IB_GID_INDEX '$NCCL_IB_GID_INDEX'" >&2
    exit 1 ;;
esac
export NCCL_IB_GID_INDEX

exec vllm serve deepseek-ai/DeepSeek-V4-Flash-0731 \
  --served-model-name deepseek-v4-flash deepseek-v4-flash-0731 \
  --revision 9e165c30e2704aec5d9d593cce3eebd58bbef1cb \
  --tensor-parallel-size 2 \
  --pipeline-parallel-size 1 \
  --distributed-executor-backend mp \
  --kv-cache-dtype nvfp4_ds_mla \
  --block-size 256 \
  --max-model-len 204800 \
  --max-num-batched-tokens 16384 \
  --max-num-seqs 6 \
  --gpu-memory-utilization 0.82 \
  --speculative-config '{"method":"dspark","num_speculative_tokens":5,"draft_sample_method":"probabilistic"}' \
  --enable-prefix-caching \
  --enable-chunked-prefill \
  --async-scheduling \
  --enforce-eager \
  --tokenizer-mode deepseek_v4 \
  --tool-call-parser deepseek_v4 \
  --reasoning-parser deepseek_v4 \
  --enable-auto-tool-choice \
  --enable-prompt-tokens-details \
  --nnodes 2 \
  --node-rank 0 \
  --master-addr 192.168.100.1 \
  --master-port 25000 \
  --host 192.168.0.27 \
  --port 8888 \
  --enable-server-load-tracking
