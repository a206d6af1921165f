"""Unit tests are the same on every machine:
- a plan for the `cpu` hardware profile reads this machine's CPU (AMX tiles or not), so here
  it reads a CPU without them (tests of the AMX path name the `cpu-amx` profile);
- the services a local run starts (LiteLLM, Prometheus, node_exporter) are found as stand-in
  programs on the PATH, whether this machine has them installed or not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SERVICE_PROGRAMS = ("litellm", "prometheus", "prometheus-node-exporter")


@pytest.fixture(autouse=True)
def cpu_without_amx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("deskside.planner.inputs.this_machine_amx", lambda: False)


@pytest.fixture(scope="session")
def stand_in_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("stand-in-bin")
    for name in SERVICE_PROGRAMS:
        program = folder / name
        program.write_text("#!/bin/sh\necho stand-in: not the real program >&2\nexit 1\n")
        program.chmod(0o755)
    return folder


@pytest.fixture(autouse=True)
def service_programs(stand_in_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{stand_in_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("DESKSIDE_LITELLM", raising=False)
