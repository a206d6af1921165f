"""The fabric between nodes: RoCE discovery (sysfs), RoCEv2 GID selection and drift,
NCCL/Gloo environment, the launch-time GID snippet, and probes (MTU, ping, all-reduce)."""
