"""The plain pip path, as a new user takes it (tests/e2e/pip_venv.py): a fresh virtual
environment, `pip install '.[cpu]'`, then `deskside demo`: the two-node TP=2 run must
serve with nothing uninstalled. That demo, run with `--keep-up` from the fresh venv, is
the start of the shared cluster (tests/e2e/conftest.py); these are its own claims."""

from __future__ import annotations

import pytest

from .conftest import SharedCluster
from .pip_venv import Install

pytestmark = pytest.mark.e2e


def test_pip_install_into_a_fresh_venv(pip_venv_install: Install) -> None:
    install = pip_venv_install
    if install.reused:
        pytest.skip("DESKSIDE_E2E_VENV names a prepared venv: no pip install ran")
    assert install.returncode == 0, install.tail()
    # What the demo has to live with: report it, whatever pip brought this time.
    print(f"pip install: {install.seconds:.0f} s; beside the CPU torch:", install.present())


def test_demo_from_the_fresh_venv_serves(local_tiny: SharedCluster) -> None:
    result = local_tiny.demo
    print(f"deskside demo (start-up, completions, bench): {local_tiny.seconds:.0f} s")
    served = {c["model"]: c["output_tokens"] for c in result["completions"]}
    assert set(served) == {"deepseek-v4-flash-tiny", "tiny"}, result  # name and alias
    assert all(tokens > 0 for tokens in served.values()), result
    assert len(result["table"]) == 3
    assert all(row["aggregate_tok_s"] > 0 for row in result["table"]), result["table"]
    assert result["logged_kv_cache_line"], result
    assert not [n for n in result["notes"] if "not started" in n], result["notes"]  # all ran
    # the embedded recipe's tiny model was made on first use, in DESKSIDE_HOME
    assert (local_tiny.home / "models" / "tiny-deepseek-v3" / "config.json").is_file()
