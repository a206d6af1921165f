"""Unit tests are the same on every machine: a plan for the `cpu` hardware profile reads this
machine's CPU (AMX tiles or not), so here it reads a CPU without them. Tests of the AMX path
name the `cpu-amx` profile."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def cpu_without_amx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("deskside.planner.inputs.this_machine_amx", lambda: False)
