"""The upgrade's pure parts: the bench proof, the set's shape an upgrade may not change,
and the drain gate's choice of the group that serves a new request."""

from __future__ import annotations

from pathlib import Path

from deskside.replicas.gate_server import Gate
from deskside.replicas.upgrade import BenchResult, bench_verdict, same_shape

from .render_cases import ROOT, load_recipe_with_model

SET = ROOT / "recipes" / "local-replicas.yaml"
W = "8 x chat, 16 tokens, one at a time"


def test_the_bench_proof() -> None:
    before = BenchResult(W, 8, 0, 0.200)
    assert bench_verdict(before, BenchResult(W, 8, 0, 0.290)) is None  # +45 %
    why = bench_verdict(before, BenchResult(W, 8, 0, 0.320))
    assert why is not None and why.startswith("median latency 320 ms, 60% over the group's 200 ms")
    assert bench_verdict(before, BenchResult(W, 8, 1, 0.2)) == "1 of 8 bench requests failed"
    # a few milliseconds are noise, whatever the share
    assert bench_verdict(BenchResult(W, 8, 0, 0.002), BenchResult(W, 8, 0, 0.010)) is None


def test_the_bench_proof_names_its_baseline() -> None:
    why = bench_verdict(BenchResult(W, 8, 0, 0.2), BenchResult(W, 8, 0, 0.4), "blue's {ms} before")
    assert why == f"median latency 400 ms, 100% over blue's 200 ms before ({W})"


def test_an_upgrade_may_change_the_engines_not_the_sets_shape() -> None:
    old = load_recipe_with_model(SET)
    engines = old.model_copy(
        update={"engine": old.engine.model_copy(update={"max_num_seqs": 3, "env": {"X": "2"}})}
    )
    assert same_shape(old, engines) is None
    moved = old.model_copy(update={"engine": old.engine.model_copy(update={"port": 9999})})
    assert same_shape(old, moved) == "engine.port"
    renamed = old.model_copy(update={"model": old.model.model_copy(update={"aliases": []})})
    assert same_shape(old, renamed) == "the served names"


def test_the_gate_sends_a_drained_groups_requests_to_an_open_one(tmp_path: Path) -> None:
    keys = tmp_path / "engines.env"
    keys.write_text("K_A=a\nK_B=b\n")
    drained = tmp_path / "drained"
    gate = Gate(
        {
            "groups": {
                "a": {"port": 1, "upstream": "http://10.0.0.1:8000", "key_env": "K_A"},
                "b": {"port": 2, "upstream": "http://10.0.0.2:8000", "key_env": "K_B"},
            },
            "keys_file": str(keys),
            "drain_file": str(drained),
        }
    )
    assert gate.keys == {"K_A": "a", "K_B": "b"}
    assert (gate.target("a"), gate.target("b")) == ("a", "b")  # no drain file: all open
    drained.write_text("a\n")
    assert (gate.target("a"), gate.target("b")) == ("b", "b")
    drained.write_text("a\nb\n")
    assert gate.target("a") is None  # nothing open: the gate answers 503
    drained.write_text("")
    assert gate.target("a") == "a"
    assert gate.state() == {
        "in_flight": {"a": 0, "b": 0},
        "relayed": {"a": 0, "b": 0},
        "drained": [],
    }
