"""Shared pytest options: --update-golden rewrites golden files instead of comparing.
Every test runs with DESKSIDE_HOME in a temporary folder (one per session), so nothing
deskside makes on first use lands in the real home. Runs on this machine find the LiteLLM
proxy that `make test` installs in .venv-proxy (DESKSIDE_LITELLM), unless one is set."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PROXY_LITELLM = (
    Path(os.environ.get("DESKSIDE_PROXY_VENV", Path(__file__).parents[1] / ".venv-proxy"))
    / "bin"
    / "litellm"
)
if PROXY_LITELLM.is_file():
    os.environ.setdefault("DESKSIDE_LITELLM", str(PROXY_LITELLM))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden files from the current output",
    )


@pytest.fixture(scope="session")
def session_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("deskside-home")


@pytest.fixture(autouse=True)
def _deskside_home(session_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKSIDE_HOME", str(session_home))


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))
