"""Model families the planner knows: each reads its config.json, lists its per-layer KV
cache specs, accounts for KV memory as vLLM does and estimates its non-KV memory.
deskside.planner.registry finds the family of a config."""
