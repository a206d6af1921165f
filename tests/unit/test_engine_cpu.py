"""The CPU launcher's set-up reaches every process vLLM starts: in the launcher itself, in
children spawned with multiprocessing's `spawn` (vLLM's engine core and workers on CPU), and
in plain `python -m ...` subprocesses (vLLM's model-registry inspection). A stand-in
`torchvision` that fails on import the way PyPI's build does beside the CPU torch shows the
hiding is real, not an absent package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from deskside.engine import cpu

BROKEN = 'raise RuntimeError("operator torchvision::nms does not exist")\n'

# Prints, for each hidden name: how `import` fails, whether find_spec sees it, and the
# `vllm` distribution's version as vLLM would look it up.
REPORT = textwrap.dedent(
    """
    import importlib.util, json, os, sys
    def report():
        out = {}
        for name in ("torchvision", "torchaudio", "torchcodec"):
            try:
                __import__(name)
                how = "imported"
            except ModuleNotFoundError:
                how = "ModuleNotFoundError"
            except Exception as exc:
                how = type(exc).__name__
            out[name] = [how, importlib.util.find_spec(name) is None]
        out["pythonpath0"] = os.environ.get("PYTHONPATH", "").split(os.pathsep)[0]
        out["shadowed"] = os.environ.get("SHADOWED_RAN_IN") == str(os.getpid())
        return out
    """
)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A folder with a broken `torchvision` and a `sitecustomize` of its own (which the
    launcher's must not swallow)."""
    (tmp_path / "torchvision").mkdir()
    (tmp_path / "torchvision" / "__init__.py").write_text(BROKEN)
    (tmp_path / "sitecustomize.py").write_text(
        "import os\nos.environ['SHADOWED_RAN_IN'] = str(os.getpid())\n"
    )
    (tmp_path / "probe.py").write_text(REPORT)
    return tmp_path


def run(code: str, site: Path, pythonpath: str | None = None) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": pythonpath or f"{site}{os.pathsep}{_src()}"}
    env.pop("SHADOWED_RAN_IN", None)
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=site,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _src() -> str:
    return str(Path(cpu.__file__).parents[2])


def test_without_the_launcher_the_stand_in_breaks_like_pypi_torchvision(site: Path) -> None:
    got = run("import json, probe; print(json.dumps(probe.report()))", site)
    assert got["torchvision"] == ["RuntimeError", False]


def test_install_hides_the_packages_in_this_process(site: Path) -> None:
    got = run(
        "import json, probe\n"
        "from deskside.engine.cpu import install\n"
        "install()\n"
        "print(json.dumps(probe.report()))",
        site,
    )
    for name in cpu.HIDDEN_MODULES:
        assert got[name] == ["ModuleNotFoundError", True], name
    assert got["pythonpath0"] == cpu.PYTHONPATH_DIR


def test_a_plain_subprocess_gets_it_through_the_environment(site: Path) -> None:
    # like vLLM's `python -m vllm.model_executor.models.registry`
    got = run(
        "import json, subprocess, sys\n"
        "from deskside.engine.cpu import install\n"
        "install()\n"
        "child = subprocess.run([sys.executable, '-c', "
        "'import json, probe; print(json.dumps(probe.report()))'], "
        "capture_output=True, text=True, check=True)\n"
        "print(child.stdout.strip())",
        site,
    )
    for name in cpu.HIDDEN_MODULES:
        assert got[name] == ["ModuleNotFoundError", True], name
    assert got["shadowed"] is True  # the sitecustomize the launcher's shadows still ran


def test_a_spawned_child_gets_it(site: Path) -> None:
    # like vLLM's engine core and workers on CPU (multiprocessing, spawn)
    (site / "spawner.py").write_text(
        textwrap.dedent(
            """
            import json, multiprocessing as mp, probe
            from deskside.engine.cpu import install

            def child(q):
                q.put(probe.report())

            if __name__ == "__main__":
                install()
                ctx = mp.get_context("spawn")
                q = ctx.Queue()
                p = ctx.Process(target=child, args=(q,))
                p.start()
                print(json.dumps(q.get(timeout=60)))
                p.join()
            """
        )
    )
    got = run("import runpy; runpy.run_path('spawner.py', run_name='__main__')", site)
    for name in cpu.HIDDEN_MODULES:
        assert got[name] == ["ModuleNotFoundError", True], name


def test_torch_helpers_started_with_sys_path_as_pythonpath_get_it(site: Path) -> None:
    # torch._inductor.utils.python_subprocess_env: PYTHONPATH = os.pathsep.join(sys.path)
    got = run(
        "import json, os, subprocess, sys\n"
        "from deskside.engine.cpu import install\n"
        "install()\n"
        "env = {**os.environ, 'PYTHONPATH': os.pathsep.join(sys.path)}\n"
        "child = subprocess.run([sys.executable, '-c', "
        "'import json, probe; print(json.dumps(probe.report()))'], "
        "capture_output=True, text=True, check=True, env=env)\n"
        "print(child.stdout.strip())",
        site,
    )
    for name in cpu.HIDDEN_MODULES:
        assert got[name] == ["ModuleNotFoundError", True], name


def test_importing_the_launcher_changes_nothing(site: Path) -> None:
    got = run(
        "import json, sys, probe\n"
        "import deskside.engine.cpu\n"
        "print(json.dumps({**probe.report(), 'meta': any("
        "getattr(f, 'deskside_vllm_alias', False) for f in sys.meta_path)}))",
        site,
    )
    assert got["torchvision"] == ["RuntimeError", False]
    assert got["meta"] is False
    assert got["pythonpath0"] != cpu.PYTHONPATH_DIR


def test_install_is_idempotent(site: Path) -> None:
    got = run(
        "import json, os, sys\n"
        "from deskside.engine.cpu import install\n"
        "install(); install()\n"
        "print(json.dumps({'finders': sum(getattr(f, 'deskside_vllm_alias', False) "
        "for f in sys.meta_path), 'pythonpath': os.environ['PYTHONPATH']}))",
        site,
    )
    assert got["finders"] == 1
    assert str(got["pythonpath"]).split(os.pathsep).count(cpu.PYTHONPATH_DIR) == 1


def test_with_pythonpath_dir() -> None:
    d = cpu.PYTHONPATH_DIR
    assert cpu.with_pythonpath_dir(None) == d
    assert cpu.with_pythonpath_dir("") == d
    assert cpu.with_pythonpath_dir("/a:/b") == f"{d}{os.pathsep}/a{os.pathsep}/b"
    assert cpu.with_pythonpath_dir(f"/a{os.pathsep}{d}") == f"/a{os.pathsep}{d}"
    assert Path(d, "sitecustomize.py").is_file()


def test_a_child_that_reimports_the_launcher_as_mp_main_gets_it(site: Path) -> None:
    # a spawned child of `python -m deskside.engine.cpu` re-imports it as __mp_main__
    got = run(
        "import json, os, runpy, sys, probe\n"
        "os.environ.pop('PYTHONPATH')\n"
        "runpy.run_module('deskside.engine.cpu', run_name='__mp_main__')\n"
        "print(json.dumps(probe.report()))",
        site,
    )
    for name in cpu.HIDDEN_MODULES:
        assert got[name] == ["ModuleNotFoundError", True], name
