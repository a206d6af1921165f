"""deskside bench: the seed's table, measured honestly.

Layers (inner ones never import outer ones): ``workload`` (matrix, exact-length prompts)
-> ``client`` (streaming) -> ``metrics`` / ``server_metrics`` (pure) -> ``runner``
(``run_bench``) -> ``report`` and ``outputs`` (one module per format) -> ``cli``.
"""

from __future__ import annotations

from deskside.bench.models import BenchConfig, BenchResult
from deskside.bench.runner import arun_bench, run_bench

__all__ = ["BenchConfig", "BenchResult", "arun_bench", "run_bench"]
