"""One rank of deskside's all-reduce bandwidth probe.

Self-contained on purpose (standard library + torch only): `deskside.fabric.probe` sends
this file's text to a node as `python -c SOURCE ARGS...`, so the node needs torch but not
deskside. Prints exactly one JSON object on stdout and exits 0 when the rank finished.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deskside-allreduce")
    parser.add_argument("--backend", choices=["gloo", "nccl"], required=True)
    parser.add_argument("--master-addr", required=True)
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--size-bytes", type=int, required=True)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--local-rank", type=int, default=0)
    args = parser.parse_args(argv)
    out: dict[str, Any] = {"rank": args.rank, "backend": args.backend, "ok": False}
    try:
        import torch
        import torch.distributed as dist

        device = "cpu"
        if args.backend == "nccl":
            torch.cuda.set_device(args.local_rank)
            device = f"cuda:{args.local_rank}"
        started = time.perf_counter()
        dist.init_process_group(
            args.backend,
            init_method=f"tcp://{args.master_addr}:{args.master_port}",
            rank=args.rank,
            world_size=args.world_size,
            timeout=datetime.timedelta(seconds=args.timeout),
        )
        out["rendezvous_seconds"] = round(time.perf_counter() - started, 3)
        count = max(1, args.size_bytes // 4)
        tensor = torch.empty(count, dtype=torch.float32, device=device)

        def sync() -> None:
            if device != "cpu":
                torch.cuda.synchronize()

        # Correctness first: every rank contributes rank + 1.
        tensor.fill_(float(args.rank + 1))
        dist.all_reduce(tensor)
        sync()
        expected = args.world_size * (args.world_size + 1) / 2
        out["correct"] = bool(torch.all(tensor == expected).item())
        tensor.zero_()  # stays finite however often it is summed
        for _ in range(args.warmup):
            dist.all_reduce(tensor)
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iterations):
            dist.all_reduce(tensor)
        sync()
        elapsed = time.perf_counter() - t0
        dist.barrier()
        dist.destroy_process_group()
        out.update(
            ok=True,
            size_bytes=count * 4,
            iterations=args.iterations,
            seconds=elapsed,
            seconds_per_iteration=elapsed / max(1, args.iterations),
            torch=str(torch.__version__),
        )
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
