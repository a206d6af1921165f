"""A second `up` of a replica set that is already up is refused, and the refusal stops
nothing: the running set's proxy (a process this test started, tagged as deskside tags
it) is still alive afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from deskside.records.replica_set import ProxyProcess, SetRecord, save_set
from deskside.replicas.plans import plan_set
from deskside.replicas.start import up_set
from deskside.runtime import node_sh
from deskside.runtime.pipeline import UpOptions
from deskside.transport.local import LocalTransport

from .render_cases import ROOT, load_recipe_with_model

SET_FILE = ROOT / "recipes" / "local-replicas.yaml"


def test_already_up_is_refused_and_nothing_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path))
    recipe = load_recipe_with_model(SET_FILE)
    tag = "local-replicas/proxy/20260101000000/proxy"
    proxy = subprocess.Popen(
        ["sleep", "300"], env={**os.environ, node_sh.RUN_TAG: tag}, start_new_session=True
    )
    try:
        start = node_sh.parse_proc_start(LocalTransport().run(node_sh.proc_start(proxy.pid)).stdout)
        save_set(
            SetRecord(
                recipe=str(SET_FILE),
                recipe_name="local-replicas",
                runtime="local",
                groups=["a", "b"],
                proxy_url="http://127.0.0.1:4100",
                proxy=ProxyProcess(pid=proxy.pid, pid_start=start, run_tag=tag, log="/dev/null"),
                started_at="2026-01-01T00:00:00+00:00",
            )
        )
        report = up_set(recipe, SET_FILE, plan_set(recipe, SET_FILE), UpOptions())
        assert not report.ok and report.error is not None
        assert "already up" in report.error and report.groups == {}
        assert proxy.poll() is None  # the running set's proxy was left alone
        assert (tmp_path / "runs" / "local-replicas" / "replica-set.json").is_file()
    finally:
        os.killpg(proxy.pid, signal.SIGKILL)
        proxy.wait()
