"""A diagnosis bundle from fake nodes: one node answers (with secrets planted in its log,
command lines and metrics), the other cannot be reached. The bundle is still written, with
the first node's pieces, the second's recorded as not collected, the reason in
MANIFEST.json, and no planted secret anywhere in the archive."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from deskside.diagnose import known, procs, stacks
from deskside.diagnose.bundle import bundle_name, write_bundle
from deskside.layout import ENGINE_KEY_ENV
from deskside.records.node import NodeState
from deskside.records.read import NODE_READ_SH
from deskside.records.run import RunNode, RunRecord
from deskside.runtime import node_sh
from deskside.secrets import engine_env_path, write_secret_file
from deskside.transport.base import Result
from deskside.transport.fake import FakeTransport
from deskside.transport.ssh import SshError

from ..monitor_stub import node_state
from .proc_tables import P, table_text, tagged

NAME = "diagunit"
ENGINE_KEY = "Q7engineKEYvalue0001"  # known only from this machine's secrets folder
NODE_KEY = "R8nodeSideKEYvalue02"  # known only from the node's secret files
HF = "hf_" + "PlantedTokenPlantedToken0123456789"
SK = "sk-" + "plantedProxyKey_0123456789"
PLANTED = (ENGINE_KEY, NODE_KEY, HF, SK, "bearer-planted-value")

LOG = (
    "INFO starting vLLM API server\n"
    f"DEBUG env VLLM_API_KEY={ENGINE_KEY}\n"
    f"DEBUG node key {NODE_KEY} and engine key {ENGINE_KEY} in one line\n"
    f"DEBUG token {HF}\n"
    "DEBUG header Authorization: Bearer bearer-planted-value\n"
    "ERROR NCCL watchdog timeout\n"
)
ENGINE_TAG = f"{NAME}/node0/20260101000000/engine"
TABLE = table_text(
    [
        tagged(
            500,
            ENGINE_TAG,
            start=42,
            comm="sh",
            utime=10,
            stime=5,
            threads=2,
            rss_pages=250,
            argv=("sh", "-c", f"launch.sh --api-key {SK}"),
        ),
        tagged(
            501,
            ENGINE_TAG,
            ppid=500,
            session=500,
            start=43,
            comm="python3",
            state="D",
            utime=900,
            stime=100,
            rss_pages=2250,
            argv=(
                "/venv/bin/python3",
                "-m",
                "vllm.entrypoints.openai.api_server",
                f"--api-key={SK}",
            ),
        ),
    ]
)
TREE = (
    "roots 500 501\n"
    + TABLE
    + "500/wchan:do_wait\n501/wchan:nfs_wait\n"
    + "500/task/500/stat:"
    + P(500, state="S", utime=10, stime=5, comm="sh").stat()
    + "500/task/500/wchan:do_wait\n"
    + "501/task/501/stat:"
    + P(501, state="D", utime=900, stime=100, comm="python3").stat()
    + "501/task/501/wchan:nfs_wait\n"
)
STACKS = "py-spy: not found\n\n=== process 500 (sh)\n--- thread 500 (sh) state S wchan do_wait\n"


def _state(recipe_dir: str) -> NodeState:
    tag, log = f"{NAME}/node0/20260101000000/engine", f"{recipe_dir}/logs/engine.log"
    return node_state(NAME, pid=500, pid_start=42, run_tag=tag, log=log)


def answering(recipe_dir: str) -> FakeTransport:
    def answer(argv: Sequence[str]) -> Result:
        script = argv[2] if len(argv) > 2 and argv[:2] == ["sh", "-c"] else None
        outputs = {
            NODE_READ_SH: _state(recipe_dir).model_dump_json(),
            known.NODE_SECRETS_SH: f"{ENGINE_KEY_ENV}={NODE_KEY}\n",
            node_sh.TAIL_SH: LOG,
            procs.SESSION_PIDS_SH: TABLE + "claim\n" + "\n".join(argv[4:7]),
            procs.TREE_SH: TREE,
            stacks.STACKS_SH: STACKS,
        }
        if script in outputs:
            return Result(0, outputs[script], "")
        if list(argv) == ["id", "-u"]:
            return Result(0, "0\n", "")
        return Result(1, "", "not scripted")

    return FakeTransport(label="node0", default=answer)


class Unreachable(FakeTransport):
    def run(self, argv: Sequence[str], **kwargs: object) -> Result:  # type: ignore[override]
        self.calls.append(("run", tuple(argv), {}))
        raise SshError("node1: unreachable (timed out)")


def _record(home: Path) -> RunRecord:
    nodes = [
        RunNode(
            name=name,
            role=role,
            node_rank=rank,
            address=f"10.9.0.{rank + 1}",
            ssh=None,
            recipe_dir=str(home / "runs" / NAME / "nodes" / name),
        )
        for rank, (name, role) in enumerate([("node0", "head"), ("node1", "worker")])
    ]
    return RunRecord(
        recipe=str(home / "gone.yaml"),
        recipe_name=NAME,
        runtime="local",
        control="process",
        runtime_kind="native",
        unit=f"deskside-{NAME}",
        compose_project=f"deskside-{NAME}",
        api_url="http://10.9.0.1:8000",
        proxy_url=None,
        served_names=["tiny"],
        started_at="2026-01-01T00:00:00Z",
        nodes=nodes,
    )


def _http(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/metrics" and request.url.host == "10.9.0.1":
        return httpx.Response(200, text=f"# a comment naming {NODE_KEY}\nvllm:x 1\n")
    return httpx.Response(404)


def _extract(path: Path) -> dict[str, str]:
    with tarfile.open(path) as tar:
        return {
            m.name.split("/", 1)[1]: (tar.extractfile(m) or io.BytesIO()).read().decode()
            for m in tar.getmembers()
            if m.isfile()
        }


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return tmp_path / "home"


def test_one_node_unreachable_still_makes_a_bundle_without_secrets(
    home: Path, tmp_path: Path
) -> None:
    write_secret_file(engine_env_path(NAME), (f"{ENGINE_KEY_ENV}={ENGINE_KEY}" + "\n").encode())
    run = _record(home)
    node0 = answering(run.nodes[0].recipe_dir)
    node1 = Unreachable(label="node1")
    report = write_bundle(
        run,
        tmp_path / "out",
        transports={"node0": node0, "node1": node1},
        reason="wedged: no token for 120 s",
        http_transport=httpx.MockTransport(_http),
    )
    assert report.path.parent == tmp_path / "out"
    assert report.path.name.startswith(f"deskside-diagnose-{NAME}-")
    assert report.path.name.endswith("Z.tar.gz")
    assert oct(report.path.stat().st_mode & 0o777) == "0o600"
    assert oct((tmp_path / "out").stat().st_mode & 0o777) == "0o700"

    files = _extract(report.path)
    assert sorted(files) == sorted(report.members)
    for member in (
        "MANIFEST.json",
        "nodes/node0/state.json",
        "nodes/node0/engine.log",
        "nodes/node0/processes.txt",
        "nodes/node0/processes.json",
        "nodes/node0/stacks.txt",
        "cluster/run.json",
        "cluster/status.json",
        "cluster/engine-metrics.txt",
    ):
        assert member in files, member
    assert not any(m.startswith("nodes/node1/") for m in files)
    assert "ERROR NCCL watchdog timeout" in files["nodes/node0/engine.log"]
    assert (
        " D " in files["nodes/node0/processes.txt"]
        and "nfs_wait" in files["nodes/node0/processes.txt"]
    )
    assert files["nodes/node0/stacks.txt"] == STACKS

    manifest = json.loads(files["MANIFEST.json"])
    assert manifest["reason"] == "wedged: no token for 120 s" and manifest["recipe"] == NAME
    by_name = {m["name"]: m for m in manifest["members"]}
    assert by_name["nodes/node0/engine.log"]["redactions"] >= 5
    assert by_name["nodes/node1/state.json"]["error"] == "node1: unreachable (timed out)"
    for piece in ("engine.log", "processes.txt", "stacks.txt"):
        assert by_name[f"nodes/node1/{piece}"]["error"].startswith("not collected: node1")
    assert by_name["cluster/deskside.lock"]["skipped"]
    assert "cluster/plan.json: the recipe could not be loaded" in " ".join(report.errors)
    assert report.errors == manifest["errors"]
    # the unreachable node was tried once, not once per piece
    assert len(node1.calls) == 2  # the bundle's state read, and status's

    raw = gzip.decompress(report.path.read_bytes())
    for secret in PLANTED:
        assert secret.encode() not in raw, secret
        assert secret not in json.dumps(report.to_dict())


def test_a_second_bundle_in_the_same_second_gets_its_own_name(home: Path, tmp_path: Path) -> None:
    run = _record(home)
    transports = {"node0": Unreachable(label="n0"), "node1": Unreachable(label="n1")}
    a = write_bundle(
        run, tmp_path, transports=transports, http_transport=httpx.MockTransport(_http)
    )
    b = write_bundle(
        run, tmp_path, transports=transports, http_transport=httpx.MockTransport(_http)
    )
    assert a.path != b.path and a.path.exists() and b.path.exists()


def test_bundle_name() -> None:
    when = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    assert bundle_name("local-tiny", when) == "deskside-diagnose-local-tiny-20260304T050607Z"
    assert bundle_name("../x y", when).startswith("deskside-diagnose-_x_y-")


def test_cli_names_a_missing_run_without_a_traceback(home: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from deskside.cli.app import app

    result = CliRunner().invoke(app, ["diagnose", "nothing-here", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 1, result.output
    error = json.loads(result.stdout)
    assert error["message"] == "no run named 'nothing-here', and no recipe file there"
    assert not list(tmp_path.glob("*.tar.gz"))
