"""deskside bench: TTFT, prefill, decode and aggregate tok/s per prompt length x
concurrency, with the server's own counters, measured honestly.

Layers (inner ones never import outer ones): ``workload`` (matrix, exact-length prompts)
-> ``client`` (streaming) -> ``metrics`` / ``server_metrics`` (pure) -> ``runner``
(``run_bench``) -> ``report`` and ``outputs`` (one module per format) -> ``cli``.
"""
