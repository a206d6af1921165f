"""Client overhead: `deskside bench` against `vllm bench serve`, same server, same workload.

Both tools run as separate processes against one synthetic OpenAI-compatible server
(`deskside.bench.synthetic`, its own process) on the completions endpoint, with the same
concurrency, prompt length and output length (`ignore_eos`), one token per chunk.

- Client CPU per 1,000 streamed tokens is *marginal*: each tool runs a small and a large
  workload and the difference of their CPU time (user + system, from the kernel's rusage
  of the finished child) is divided by the difference of streamed tokens. Start-up
  (imports, tokenizer loading, warm-ups, the ready check) cancels out, so what is left is
  the cost of streaming, parsing and recording tokens.
- TTFT error is measured against the server's own send timestamps: both processes read
  the same CLOCK_MONOTONIC (Python's time.monotonic and time.perf_counter on Linux), so
  the client's first-token arrival (epoch + sent + TTFT) minus the server's send time of
  that chunk is how late the client timestamped it. deskside's requests are matched by
  response id; vllm bench serve's by its x-request-id header.

Run: python benchmarks/client_overhead.py [--large 64] [--small 8] [--repeats 1]
The last two lines are `ttft_error_ms_p50: <float>` and `cpu_ratio: <float>`
(deskside CPU per token / vllm bench serve CPU per token; the target is <= 0.5).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from deskside.tiny import write_tiny_model


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_child(argv: list[str], out: Path | None = None) -> tuple[float, float]:
    """(cpu seconds, wall seconds) of one child process run to completion."""
    import time

    before = child_cpu()
    start = time.monotonic()
    with out.open("wb") if out else open(os.devnull, "wb") as stdout:
        proc = subprocess.run(argv, stdout=stdout, stderr=subprocess.PIPE, check=False)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr.decode(errors="replace")[-3000:])
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(argv[:6])} ...")
    return child_cpu() - before, wall


def start_server(ttft: float, interval: float) -> tuple[subprocess.Popen[bytes], str]:
    argv = [sys.executable, "-m", "deskside.bench.synthetic", "--port", "0"]
    argv += ["--ttft", str(ttft), "--chunk-interval", str(interval), "--model", "synthetic"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"synthetic server did not start: {line!r}")
    return proc, "http://" + line.removeprefix("listening on ")


def server_log(url: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = httpx.get(f"{url}/synthetic/log", timeout=30).json()
    return data


def deskside_run(url: str, n: int, args: argparse.Namespace, out: Path) -> tuple[float, int]:
    argv = [sys.executable, "-m", "deskside.cli", "bench", "--url", url, "--endpoint"]
    argv += ["completions", "--prompt-lens", str(args.prompt_len), "--concurrency"]
    argv += [str(args.concurrency), "--requests", str(n), "--max-tokens", str(args.max_tokens)]
    argv += ["--json"]
    cpu, _ = run_child(argv, out)
    result = json.loads(out.read_text())
    tokens = sum(r["output_tokens"] or 0 for c in result["cells"] for r in c["requests"])
    return cpu, tokens


def vllm_run(
    url: str, n: int, args: argparse.Namespace, tokenizer: Path, out_dir: Path, name: str
) -> tuple[float, int]:
    argv = [sys.executable, "-m", "deskside.engine.cpu", "bench", "serve", "--backend", "vllm"]
    argv += ["--base-url", url, "--endpoint", "/v1/completions", "--model", "synthetic"]
    argv += ["--tokenizer", str(tokenizer), "--dataset-name", "random", "--input-len"]
    argv += [str(args.prompt_len), "--output-len", str(args.max_tokens), "--num-prompts", str(n)]
    argv += ["--max-concurrency", str(args.concurrency), "--ignore-eos", "--num-warmups", "0"]
    argv += ["--disable-tqdm", "--request-id-prefix", "vbs-", "--seed", "0", "--save-result"]
    argv += ["--save-detailed", "--result-dir", str(out_dir), "--result-filename", name]
    cpu, _ = run_child(argv)
    result = json.loads((out_dir / name).read_text())
    # the ready check streams one request before the measured ones
    tokens = int(result["total_output_tokens"]) + args.max_tokens
    return cpu, tokens


def ttft_errors_deskside(result_file: Path, log: list[dict[str, Any]]) -> list[float]:
    result = json.loads(result_file.read_text())
    by_id = {s["id"]: s for s in log}
    epoch = result["clock_epoch_s"]
    errors = []
    for cell in result["cells"]:
        for r in cell["requests"]:
            if r["warmup"] or not r["ok"]:
                continue
            sent = by_id[r["response_id"]]
            arrived = epoch + r["sent_s"] + r["ttft_s"]
            errors.append((arrived - sent["first_token_sent"]) * 1e3)
    return errors


def ttft_errors_vllm(result_file: Path, log: list[dict[str, Any]]) -> list[float]:
    result = json.loads(result_file.read_text())
    by_request = {s["request_id"]: s for s in log if s.get("request_id")}  # last one wins
    errors = []
    for i, (start, ttft) in enumerate(zip(result["start_times"], result["ttfts"], strict=True)):
        sent = by_request.get(f"vbs-{i}")
        if sent and ttft:
            errors.append((start + ttft - sent["first_token_sent"]) * 1e3)
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--small", type=int, default=8, help="requests in the small run")
    parser.add_argument("--large", type=int, default=64, help="requests in the large run")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--ttft", type=float, default=0.02, help="synthetic server TTFT (s)")
    parser.add_argument("--chunk-interval", type=float, default=0.004, help="seconds/chunk")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="client-overhead-"))
    tokenizer = write_tiny_model("llama", work / "tiny")
    server, url = start_server(args.ttft, args.chunk_interval)
    per_1k: dict[str, list[float]] = {"deskside": [], "vllm bench serve": []}
    ttft_err: dict[str, list[float]] = {"deskside": [], "vllm bench serve": []}
    try:
        for rep in range(args.repeats):
            runs = {}
            for n in (args.small, args.large):
                out = work / f"deskside-{rep}-{n}.json"
                runs[n] = deskside_run(url, n, args, out)
                if n == args.large:
                    ttft_err["deskside"] += ttft_errors_deskside(out, server_log(url))
            (cpu_s, tok_s), (cpu_l, tok_l) = runs[args.small], runs[args.large]
            per_1k["deskside"].append((cpu_l - cpu_s) / (tok_l - tok_s) * 1000)
            runs = {}
            for n in (args.small, args.large):
                name = f"vllm-{rep}-{n}.json"
                runs[n] = vllm_run(url, n, args, tokenizer, work, name)
                if n == args.large:
                    ttft_err["vllm bench serve"] += ttft_errors_vllm(work / name, server_log(url))
            (cpu_s, tok_s), (cpu_l, tok_l) = runs[args.small], runs[args.large]
            per_1k["vllm bench serve"].append((cpu_l - cpu_s) / (tok_l - tok_s) * 1000)
    finally:
        server.terminate()
        server.wait(10)

    print(
        f"workload: completions, prompt {args.prompt_len} tokens, {args.max_tokens} output "
        f"tokens, concurrency {args.concurrency}, {args.small} vs {args.large} requests, "
        f"1 token per chunk every {args.chunk_interval * 1e3:g} ms, TTFT {args.ttft * 1e3:g} ms, "
        f"{args.repeats} repeat(s)"
    )
    for tool in per_1k:
        cpu = statistics.median(per_1k[tool])
        errs = sorted(ttft_err[tool])
        p50 = statistics.median(errs) if errs else float("nan")
        p90 = errs[int(0.9 * (len(errs) - 1))] if errs else float("nan")
        print(
            f"{tool}: client CPU {cpu:.3f} s per 1,000 streamed tokens; TTFT error vs server "
            f"send p50 {p50:.3f} ms, p90 {p90:.3f} ms (n={len(errs)})"
        )
    ratio = statistics.median(per_1k["deskside"]) / statistics.median(per_1k["vllm bench serve"])
    errs = ttft_err["deskside"]
    print(f"ttft_error_ms_p50: {statistics.median(errs):.3f}")
    print(f"cpu_ratio: {ratio:.3f}")


if __name__ == "__main__":
    main()
