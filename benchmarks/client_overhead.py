"""Client overhead: `deskside bench` against `vllm bench serve`, same server, same workload.

Both tools run as separate processes against one synthetic OpenAI-compatible server
(`deskside.bench.synthetic`, its own process) on the completions endpoint, with the same
concurrency, prompt length and output length (`ignore_eos`), one token per chunk.

- Client CPU per 1,000 streamed tokens is *marginal*: each tool runs a small and a large
  workload and the difference of their CPU time (user + system, from the kernel's rusage
  of the finished child) is divided by the difference of streamed tokens. Start-up
  (imports, tokenizer loading, warm-ups, the ready check) cancels out, so what is left is
  the cost of streaming, parsing and recording tokens.
- Client CPU *while streaming*: each client's CPU time is sampled from /proc every 5 ms;
  the window runs from the server's receipt of the first of the large run's measured
  requests to its send of their last token (the server's own log), so prompt preparation,
  start-up and result writing fall outside it. `cpu_ratio` is this figure's ratio; the
  whole-process marginal ratio is printed just above it.
- TTFT error is measured against the server's own send timestamps: both processes read
  the same CLOCK_MONOTONIC (Python's time.monotonic and time.perf_counter on Linux), so
  the client's first-token arrival (epoch + sent + TTFT) minus the server's send time of
  that chunk is how late the client timestamped it. deskside's requests are matched by
  response id; vllm bench serve's by its x-request-id header.

Run: python benchmarks/client_overhead.py [--large 64] [--small 8] [--repeats 1]
The last two lines are `ttft_error_ms_p50: <float>` and `cpu_ratio: <float>`
(deskside CPU per token while streaming / vllm bench serve's; the target is <= 0.5).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from deskside.tiny import write_tiny_model


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


TICK = os.sysconf("SC_CLK_TCK")
Samples = list[tuple[float, float]]  # (monotonic time, process CPU seconds)


def proc_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def run_child(argv: list[str], out: Path | None = None) -> tuple[float, Samples]:
    """CPU seconds of one child run to completion (kernel rusage), and its CPU time sampled
    every 5 ms from /proc while it ran."""
    before = child_cpu()
    samples: Samples = []
    with out.open("wb") if out else open(os.devnull, "wb") as stdout:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE)
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                cpu = proc_cpu(proc.pid)
                if cpu is not None:
                    samples.append((time.monotonic(), cpu))
                stop.wait(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, err = proc.communicate()
        stop.set()
        sampler.join()
    if proc.returncode != 0:
        sys.stderr.write(err.decode(errors="replace")[-3000:])
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(argv[:6])} ...")
    return child_cpu() - before, samples


def cpu_at(samples: Samples, t: float) -> float:
    """The sampled CPU time at monotonic time t (linear between samples)."""
    i = bisect.bisect_left([s[0] for s in samples], t)
    if i <= 0:
        return samples[0][1]
    if i >= len(samples):
        return samples[-1][1]
    (t0, c0), (t1, c1) = samples[i - 1], samples[i]
    return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1


def window_cpu_per_1k(samples: Samples, log: list[dict[str, Any]], n: int, tokens: int) -> float:
    """Client CPU per 1,000 tokens while its last ``n`` full-length requests streamed: from
    the server's receipt of the first of them to its send of their last token."""
    measured = [s for s in log if s["max_tokens"] == tokens and s["finished"]][-n:]
    start = min(s["received"] for s in measured)
    end = max(s["last_token_sent"] for s in measured)
    streamed = sum(s["completion_tokens"] for s in measured)
    return float((cpu_at(samples, end) - cpu_at(samples, start)) / streamed * 1000)


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


def deskside_run(
    url: str, n: int, args: argparse.Namespace, out: Path
) -> tuple[float, int, Samples]:
    argv = [sys.executable, "-m", "deskside.cli", "bench", "--url", url, "--endpoint"]
    argv += ["completions", "--prompt-lens", str(args.prompt_len), "--concurrency"]
    argv += [str(args.concurrency), "--requests", str(n), "--max-tokens", str(args.max_tokens)]
    argv += ["--json"]
    cpu, samples = run_child(argv, out)
    result = json.loads(out.read_text())
    tokens = sum(r["output_tokens"] or 0 for c in result["cells"] for r in c["requests"])
    return cpu, tokens, samples


def vllm_run(
    url: str, n: int, args: argparse.Namespace, tokenizer: Path, out_dir: Path, name: str
) -> tuple[float, int, Samples]:
    argv = [sys.executable, "-m", "deskside.engine.cpu", "bench", "serve", "--backend", "vllm"]
    argv += ["--base-url", url, "--endpoint", "/v1/completions", "--model", "synthetic"]
    argv += ["--tokenizer", str(tokenizer), "--dataset-name", "random", "--input-len"]
    argv += [str(args.prompt_len), "--output-len", str(args.max_tokens), "--num-prompts", str(n)]
    argv += ["--max-concurrency", str(args.concurrency), "--ignore-eos", "--num-warmups", "0"]
    argv += ["--disable-tqdm", "--request-id-prefix", "vbs-", "--seed", "0", "--save-result"]
    argv += ["--save-detailed", "--result-dir", str(out_dir), "--result-filename", name]
    cpu, samples = run_child(argv)
    result = json.loads((out_dir / name).read_text())
    # the ready check streams one request before the measured ones
    tokens = int(result["total_output_tokens"]) + args.max_tokens
    return cpu, tokens, samples


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
    tools = ("deskside", "vllm bench serve")
    per_1k: dict[str, list[float]] = {t: [] for t in tools}
    in_window: dict[str, list[float]] = {t: [] for t in tools}
    ttft_err: dict[str, list[float]] = {t: [] for t in tools}
    try:
        for rep in range(args.repeats):
            for tool in tools:
                runs = {}
                for n in (args.small, args.large):
                    out = work / f"{tool.split()[0]}-{rep}-{n}.json"
                    if tool == "deskside":
                        runs[n] = deskside_run(url, n, args, out)
                    else:
                        runs[n] = vllm_run(url, n, args, tokenizer, work, out.name)
                    if n == args.large:
                        log = server_log(url)
                        errors = ttft_errors_deskside if tool == "deskside" else ttft_errors_vllm
                        ttft_err[tool] += errors(out, log)
                        in_window[tool].append(
                            window_cpu_per_1k(runs[n][2], log, n, args.max_tokens)
                        )
                (cpu_s, tok_s, _), (cpu_l, tok_l, _) = runs[args.small], runs[args.large]
                per_1k[tool].append((cpu_l - cpu_s) / (tok_l - tok_s) * 1000)
    finally:
        server.terminate()
        server.wait(10)

    print(
        f"workload: completions, prompt {args.prompt_len} tokens, {args.max_tokens} output "
        f"tokens, concurrency {args.concurrency}, {args.small} vs {args.large} requests, "
        f"1 token per chunk every {args.chunk_interval * 1e3:g} ms, TTFT {args.ttft * 1e3:g} ms, "
        f"{args.repeats} repeat(s)"
    )
    for tool in tools:
        errs = sorted(ttft_err[tool])
        p50 = statistics.median(errs) if errs else float("nan")
        p90 = errs[int(0.9 * (len(errs) - 1))] if errs else float("nan")
        print(
            f"{tool}: client CPU per 1,000 streamed tokens {statistics.median(in_window[tool]):.3f}"
            f" s while streaming, {statistics.median(per_1k[tool]):.3f} s whole process "
            f"(marginal); TTFT error vs server send p50 {p50:.3f} ms, p90 {p90:.3f} ms "
            f"(n={len(errs)})"
        )
    whole = statistics.median(per_1k["deskside"]) / statistics.median(per_1k[tools[1]])
    print(f"cpu_ratio_whole_process: {whole:.3f}")
    ratio = statistics.median(in_window["deskside"]) / statistics.median(in_window[tools[1]])
    print(f"ttft_error_ms_p50: {statistics.median(ttft_err['deskside']):.3f}")
    print(f"cpu_ratio: {ratio:.3f}")


if __name__ == "__main__":
    main()
