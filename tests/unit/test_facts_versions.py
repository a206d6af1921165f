"""`deskside.facts.versions`: the parser on recorded outputs (a GB10 node, a bare machine,
hostile output) and the fact run for real on this machine, finding the NCCL library the way
the engine would and the vLLM that is installed (or is not)."""

from __future__ import annotations

import contextlib
import hashlib
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deskside.facts.base import FactError, Unread, gather
from deskside.facts.versions import (
    HostVersions,
    NcclLibrary,
    NcclSearch,
    PythonEnv,
    driver_version,
    host_versions,
    parse_versions,
)
from deskside.transport.local import LocalTransport

SHA_A = "ab12" + "0" * 60
WHEEL = "/opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"

# what the fact printed on a GB10 node (DGX OS 7)
SPARK = f"""kernel=6.11.0-1016-nvidia
python=3.12.3
vllm=0.32.0
deskside=1
deskside_version=0.1.0
nccl_version=2.27.7
nccl_wheel={WHEEL}
cuda=13.0
driver_proc=NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  \
Release Build  (dvs-builder@U22-I3-AF03-09-1)  Thu Sep 25 20:25:46 UTC 2025
nccl={WHEEL}
nccl_file={WHEEL}
nccl_sha256={SHA_A}
"""

RECIPES = Path(__file__).parents[2] / "recipes"


def test_parse_a_recorded_spark() -> None:
    assert parse_versions(SPARK) == HostVersions(
        kernel="6.11.0-1016-nvidia",
        driver="580.95.05",
        cuda="13.0",
        python=PythonEnv(
            "3.12.3",
            vllm="0.32.0",
            deskside=True,
            deskside_version="0.1.0",
            nccl_version="2.27.7",
            nccl_wheel=WHEEL,
        ),
        nccl=NcclLibrary(WHEEL, file=WHEEL, sha256=SHA_A),
    )


def test_absent_things_are_none_and_not_asked_is_none_too() -> None:
    bare = parse_versions("kernel=6.8.0-49-generic\npython=3.12.3\nvllm=\ndeskside=0\nnccl=-\n")
    assert bare.driver is None and bare.cuda is None
    assert bare.python == PythonEnv("3.12.3")  # no vLLM, no deskside
    assert bare.nccl == NcclLibrary(None)  # looked for, none found
    alone = parse_versions("kernel=6.8.0\n")
    assert alone.python is None and alone.nccl is None  # neither asked about


def test_a_missing_or_broken_python_and_an_unreadable_library() -> None:
    missing = parse_versions("kernel=6.8\npython_missing=1\n")
    assert missing.python == PythonEnv(None, missing=True)
    broken = parse_versions("kernel=6.8\npython=3.12.3\npython_broken=1\n")
    assert broken.python is not None and broken.python.broken and broken.python.version is None
    lib = parse_versions("kernel=6.8\nnccl=/opt/libnccl.so.2\nnccl_unreadable=1\n").nccl
    assert lib == NcclLibrary("/opt/libnccl.so.2", readable=False)


def test_nvidia_smi_is_the_fallback() -> None:
    text = SPARK.replace("cuda=13.0\n", "").replace("driver_proc", "x")
    text += "smi_driver=580.95.05\nsmi_cuda=13.0\n"
    got = parse_versions(text)
    assert (got.driver, got.cuda) == ("580.95.05", "13.0")


def test_driver_version_lines() -> None:
    line = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 2023"
    assert driver_version(line) == "535.129.03"
    assert driver_version("NVRM version: nothing here") is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage\x00\xff",
        "python=3.12\nvllm=0.32.0\n",  # cut before the kernel line
        "x" * 100_000,
    ],
)
def test_output_without_the_kernel_line_is_refused(text: str) -> None:
    with pytest.raises(FactError):
        parse_versions(text)


def test_hostile_values_are_dropped_and_the_first_line_wins() -> None:
    text = "kernel=6.8\nvllm=\x1b[31mred\nvllm=0.1\npython=3.12\n" + "junk line\n" * 1000
    got = parse_versions(text + "kernel=forged\ndriver_proc=NVRM version: " + "9" * 9000 + "\n")
    assert got.kernel == "6.8" and got.python is not None
    assert got.python.vllm is None  # not printable: not a version
    assert got.driver is None  # the version is not a dotted number


@given(st.text(max_size=2000))
def test_any_text_parses_or_is_refused(text: str) -> None:
    with contextlib.suppress(FactError):
        parse_versions(text)


def test_the_engine_python_is_the_recipes_else_this_one_else_python3() -> None:
    from deskside.engine.launch import engine_python
    from deskside.recipe.load import load_recipe_text

    text = (RECIPES / "dual-spark-deepseek-v4-flash.yaml").read_text()
    recipe = load_recipe_text(text, "r.yaml")
    assert recipe.runtime.python is None
    assert engine_python(recipe) == "python3"
    assert engine_python(recipe, here="/opt/v/bin/python") == "/opt/v/bin/python"
    named = recipe.model_copy(
        update={"runtime": recipe.runtime.model_copy(update={"python": "/srv/py"})}
    )
    assert engine_python(named, here="/opt/v/bin/python") == "/srv/py"


# -------------------------------------------------------------------- the fact, for real


def _read(python: str | None, nccl: NcclSearch | None) -> HostVersions:
    fact = host_versions(python=python, nccl=nccl)
    got = gather(LocalTransport(), fact, timeout=60).result(fact)
    assert not isinstance(got, Unread), got
    return got


def test_the_fact_finds_the_nccl_library_the_way_the_engine_would(tmp_path: Path) -> None:
    lib = tmp_path / "nccl-a" / "libnccl.so.2.27.7"
    lib.parent.mkdir()
    lib.write_bytes(b"nccl build A")
    (lib.parent / "libnccl.so.2").symlink_to(lib.name)
    want = hashlib.sha256(b"nccl build A").hexdigest()
    link = str(lib.parent / "libnccl.so.2")
    # VLLM_NCCL_SO_PATH names the file
    got = _read(sys.executable, NcclSearch(so_path=link)).nccl
    assert got == NcclLibrary(link, file=str(lib), sha256=want)
    # libnccl.so.2 through the engine's LD_LIBRARY_PATH
    got = _read(sys.executable, NcclSearch(ld_library_path=f"/nonexistent:{lib.parent}")).nccl
    assert got is not None and got.path == link and got.sha256 == want
    # a path that is not there
    gone = _read(None, NcclSearch(so_path=str(tmp_path / "gone.so"))).nccl
    assert gone is not None and not gone.readable
    # not asked: not looked for
    assert _read(None, None).nccl is None


def test_the_fact_reads_this_machine() -> None:
    here = _read(sys.executable, None)
    assert here.kernel == Path("/proc/sys/kernel/osrelease").read_text().strip()
    assert here.python is not None and here.python.version == sys.version.split()[0]
    assert here.python.deskside
    assert _read(None, None).python is None  # no Python asked: unknown
    assert _read("no-such-python", None).python == PythonEnv(None, missing=True)


def test_the_fact_finds_the_nvidia_nccl_wheel(tmp_path: Path) -> None:
    lib = tmp_path / "site" / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"wheel build")
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={tmp_path / "site"} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    got = _read(str(wrapper), NcclSearch())
    assert got.python is not None and got.python.nccl_wheel == str(lib)
    assert got.nccl == NcclLibrary(
        str(lib), file=str(lib), sha256=hashlib.sha256(b"wheel build").hexdigest()
    )


def python_without_vllm(tmp_path: Path) -> Path:
    """A real Python whose environment has no vLLM (nor deskside): site-packages off."""
    wrapper = tmp_path / "bare-python"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_an_environment_without_vllm_says_so(tmp_path: Path) -> None:
    got = _read(str(python_without_vllm(tmp_path)), None).python
    assert got is not None and got.version == sys.version.split()[0]
    assert got.vllm is None and not got.deskside
