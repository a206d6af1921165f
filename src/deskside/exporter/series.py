"""The names of every series deskside's exporter serves. Dashboards, alert rules,
`deskside monitor check` and `deskside top` read these names from here, so a rename is
one edit. Every series carries the label `node` (the recipe's node name)."""

from __future__ import annotations

EXPORTER_PORT = 9478
"""The exporter's port on every node (outside the common exporter ports: 9100
node_exporter, 9400 DCGM exporter, 9090 Prometheus)."""

# memory (unified memory on GB10: CPU and GPU share it; running out freezes the host)
MEMORY_TOTAL = "deskside_memory_total_bytes"  # MemTotal, bytes
MEMORY_AVAILABLE = "deskside_memory_available_bytes"  # MemAvailable, bytes
MEMORY_FLOOR = "deskside_memory_floor_bytes"  # the plan's safety floor for the node, bytes

# the guard (deskside.guard): what it compares with the floor, and what it did
GUARD_AVAILABLE = "deskside_guard_available_bytes"  # min(MemAvailable, cgroup headroom)
GUARD_LOW_SECONDS = "deskside_guard_low_seconds"  # how long available is under the floor
GUARD_WINDOW = "deskside_guard_window_seconds"  # guard.window: the engine stops past it
GUARD_STOPS = "deskside_guard_stops_total"  # engine stops by the guard since the start

# RoCE: labels node, device, port (index) / node, device (drift)
GID_INDEX = "deskside_roce_gid_index"  # the GID index the fabric address resolves to now
GID_DRIFT = "deskside_roce_gid_drift"  # 1: differs from the running engine's index
GID_LAUNCHED = "deskside_roce_gid_launched_index"  # the running engine's NCCL_IB_GID_INDEX

# GPU (NVML); labels node, gpu. GPU_PRESENT is always served: 0 = no GPU on this node.
GPU_PRESENT = "deskside_gpu_present"
GPU_MEMORY_USED = "deskside_gpu_memory_used_bytes"
GPU_MEMORY_TOTAL = "deskside_gpu_memory_total_bytes"
GPU_UTILIZATION = "deskside_gpu_utilization_ratio"  # 0-1
GPU_POWER = "deskside_gpu_power_watts"
GPU_TEMPERATURE = "deskside_gpu_temperature_celsius"

# engine progress (from the engine's /metrics on the head; labels node)
ENGINE_UP = "deskside_engine_up"  # 1: the engine's /metrics answered this scrape
ENGINE_ERROR = "deskside_engine_scrape_error_info"  # 1, {reason}: why up is 0
ENGINE_TOKENS = "deskside_engine_generation_tokens_total"  # vllm:generation_tokens_total
ENGINE_RUNNING = "deskside_engine_requests_running"  # vllm:num_requests_running
ENGINE_SINCE_TOKEN = "deskside_engine_seconds_since_last_token"  # while requests run

# the cluster verdict of `deskside watch` (head only; labels node, and state)
CLUSTER_STATE = "deskside_cluster_state"  # 1 for the current state, 0 for the others
CLUSTER_LOOK_AGE = "deskside_cluster_look_age_seconds"  # since the watcher's last look
CLUSTER_STALLED = "deskside_cluster_stalled_seconds"  # no token this long while requests ran
RECOVERY_RESTARTS = "deskside_recovery_restarts_total"  # restarts by the recovery policy
RECOVERY_EXHAUSTED = "deskside_recovery_budget_exhausted"  # 1: no restart left in the period

# versions: one info series, labels deskside, vllm, driver, cuda, nccl, image_digest
VERSIONS = "deskside_versions_info"
UNKNOWN = "none"  # the label value of a version that does not apply or is not known
