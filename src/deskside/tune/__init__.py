"""`deskside tune`: the feasible frontier of a recipe's engine settings, from the exact
planner (no engine), then a benchmark of frontier points against the user's SLA.

- `grid`: the axes (max_model_len x max_num_seqs x max_num_batched_tokens x kv_cache_dtype
  x num_speculative_tokens, and gpu_memory_utilization on unified-memory GPUs) and their
  default steps around the recipe's values;
- `points`: every point planned, as `deskside plan` with the same overrides would;
- `pareto`: the frontier (pure);
- `sla`, `search`, `report`: the benchmark search, its state and its report.
"""
