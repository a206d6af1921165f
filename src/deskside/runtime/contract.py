"""Checks a started cluster must pass over HTTP: the alias contract (one short chat
completion through every served name) and the LiteLLM proxy's liveness."""

from __future__ import annotations

import time
from collections.abc import Sequence

import httpx

from deskside.errors import DesksideError


def contract_check(client: httpx.Client, base_url: str, names: Sequence[str]) -> list[str]:
    """One short chat completion per served name; returns the failures."""
    failures = []
    with client:
        for name in names:
            body = {
                "model": name,
                "messages": [{"role": "user", "content": "Reply with OK."}],
                "max_tokens": 4,
            }
            try:
                r = client.post(f"{base_url}/v1/chat/completions", json=body)
            except httpx.HTTPError as exc:
                failures.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            if r.status_code != 200:
                failures.append(f"{name}: HTTP {r.status_code}: {r.text[:200]}")
                continue
            try:
                choices = r.json().get("choices") or []
            except ValueError:
                choices = []
            if not choices:
                failures.append(f"{name}: no choices in the answer")
    return failures


def require_contract(client: httpx.Client, base_url: str, names: Sequence[str]) -> str:
    failures = contract_check(client, base_url, names)
    if failures:
        raise DesksideError(
            f"the alias contract failed through {base_url}:\n  " + "\n  ".join(failures),
            hint="every served name and alias must answer a chat completion",
        )
    return f"{len(names)} names answered through {base_url}"


def wait_proxy(client: httpx.Client, url: str, timeout: float, interval: float, log: str) -> None:
    """Until the LiteLLM proxy answers its liveness check."""
    deadline = time.monotonic() + timeout
    with client:
        while time.monotonic() < deadline:
            try:
                if client.get(f"{url}/health/liveliness").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(interval)
    raise DesksideError(f"the LiteLLM proxy does not answer at {url}", hint=f"see its log: {log}")
