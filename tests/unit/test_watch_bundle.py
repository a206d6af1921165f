"""The watcher's recovery writes the diagnostic bundle it was handed before it restarts, and
`deskside watch` (`deskside node watch`) hands it `deskside diagnose`'s."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deskside.cli.app import app
from deskside.operate.status import ClusterStatus
from deskside.operate.watch import Watch
from deskside.records.run import RunRecord, save_run
from deskside.transport.base import Transport
from deskside.transport.local import LocalTransport

from ..monitor_stub import run_record


def a_run(home: Path) -> RunRecord:
    return run_record(
        "w", "http://127.0.0.1:9", recipe_dir=str(home / "runs" / "w" / "nodes" / "node0")
    )


def test_the_recovery_writes_the_bundle_it_was_handed_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path))
    run = a_run(tmp_path)
    save_run(run)
    written: list[tuple[str, Path, str]] = []

    def bundle(r: RunRecord, folder: Path, reason: str, ts: Mapping[str, Transport]) -> str:
        written.append((r.recipe_name, folder, reason))
        return str(folder / "the-bundle.tar.gz")

    ts: dict[str, Transport] = {"node0": LocalTransport()}
    st = ClusterStatus("w", "WEDGED", run.api_url, "healthy", [], None, 1.0, 0.0, ["wedged: x"])
    said: list[str] = []
    restart = Watch("w", bundle=bundle, say=said.append)._recover(run, ts, st, time.time())
    assert written == [("w", tmp_path / "runs" / "w" / "bundles", "wedged: x")]
    assert restart.bundle == str(tmp_path / "runs" / "w" / "bundles" / "the-bundle.tar.gz")
    # no engine is recorded on node0: the restart itself fails, after the bundle
    assert not restart.ok and "nothing to restart" in restart.detail
    assert said.index(f"diagnostic bundle: {restart.bundle}") < said.index(restart.detail)
    restart = Watch("w", say=said.append)._recover(run, ts, st, time.time())
    assert restart.bundle is None and len(written) == 1  # handed none, it writes none


def test_deskside_watch_hands_the_watch_the_diagnose_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deskside.cli import watch as cli_watch

    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path))
    save_run(a_run(tmp_path))
    handed: list[object] = []

    class Recorder:
        def __init__(self, *args: object, bundle: object = None) -> None:
            handed.append(bundle)

        def once(self) -> None:
            return None  # the run is gone: the watch ends

    monkeypatch.setattr("deskside.operate.watch.Watch", Recorder)
    result = CliRunner().invoke(app, ["watch", "w", "--once"])
    assert result.exit_code == 0, result.output
    assert handed == [cli_watch.write_diagnose_bundle]
