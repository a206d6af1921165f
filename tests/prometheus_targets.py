"""What a running Prometheus scrapes, for tests: its active targets, once `count` of them
are there and up (or whatever it has when `timeout` runs out: the caller asserts)."""

from __future__ import annotations

import time
from typing import Any

import httpx


def active_targets(prometheus: str, count: int, timeout: float = 90) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    targets: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        answer = httpx.get(f"{prometheus}/api/v1/targets", timeout=10).json()
        targets = answer["data"]["activeTargets"]
        if len(targets) == count and all(t["health"] == "up" for t in targets):
            break
        time.sleep(1)
    return targets
