"""Hostile recipe values stay data in every rendered file.

The rendered scripts are executed by a real POSIX sh with fake `vllm` / `litellm` programs
on PATH that record their argv and environment: the recorded values must equal the
recipe's, and none of the `$(touch PWNED)` payloads may have run. The structured files are
parsed back (YAML, Compose's `$$`, the env file through sh) and compared too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from deskside.fabric.gid import resolve_node
from deskside.fabric.sysfs import DirSource, read_snapshot
from deskside.recipe.load import load_recipe
from deskside.render.assemble import render
from deskside.render.bundle import Bundle
from deskside.render.context import build_context

from .render_cases import (
    FLAGSHIP,
    HOSTILE_ARGS,
    HOSTILE_ENV,
    NASTY,
    NASTY_LINES,
    SYSFS,
    hostile_bundle,
    hostile_recipe_data,
    load_and_plan,
    write_hostile_recipe,
)
from .unit_words import exec_start

SHELLS = [s for s in ("sh", "dash", "bash") if shutil.which(s)]

RECORDER = """#!{python}
import json, os, sys
with open(os.environ["DESKSIDE_TEST_RECORD"], "w") as fh:
    json.dump({{"argv0": os.path.basename(sys.argv[0]), "argv": sys.argv[1:],
               "env": dict(os.environ)}}, fh)
"""


def fake_bin(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        tool = folder / name
        tool.write_text(RECORDER.format(python=sys.executable))
        tool.chmod(0o755)
    return folder


def run_script(
    script: Path,
    workdir: Path,
    shell: str = "sh",
    extra_env: dict[str, str] | None = None,
    args: Sequence[str] = (),
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """Run `script` (with `args`) with `shell` in `workdir`, fakes first on PATH; what the
    fake recorded."""
    record = workdir / "record.json"
    record.unlink(missing_ok=True)
    bin_dir = fake_bin(workdir / "bin", "vllm", "litellm", "python3")
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(workdir),
        "DESKSIDE_TEST_RECORD": str(record),
        **(extra_env or {}),
    }
    done = subprocess.run(
        [shell, str(script), *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    recorded = json.loads(record.read_text()) if record.exists() else None
    return done, recorded


def no_payload_ran(*folders: Path) -> None:
    for folder in folders:
        hits = [p for p in folder.rglob("*PWNED*") if "PWNED" in p.name and p.is_file()]
        assert not hits, f"an injected command ran: {hits}"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, Bundle, Path]:
    base = tmp_path_factory.mktemp("hostile")
    recipe, path, bundle = hostile_bundle(base / "recipe dir with spaces")
    out = base / "out dir"
    bundle.write(out)
    return recipe, path, bundle, out


@pytest.mark.parametrize("shell", SHELLS)
def test_launch_sh_passes_every_value_through_unchanged(
    hostile: tuple[Any, Path, Bundle, Path], shell: str, tmp_path: Path
) -> None:
    recipe, path, _, out = hostile
    ctx = build_context(recipe, path, load_and_plan(path)[1])
    for launch in (n.launch for n in ctx.nodes):
        script = out / launch.node / "launch.sh"
        key = None
        if launch.secret_env_file is not None:
            # behind the proxy the head refuses to start without its key...
            done, recorded = run_script(script, tmp_path, shell)
            assert done.returncode == 1 and recorded is None, done.stderr
            assert "engine key file" in done.stderr
            # ...which Compose's env_file (here: the environment) can give
            key = {"VLLM_API_KEY": "sk-hostile $(touch PWNED)"}
        done, recorded = run_script(script, tmp_path, shell, key)
        assert done.returncode == 0, done.stderr
        assert recorded is not None, "the engine was not started"
        assert recorded["argv0"] == "vllm"
        assert recorded["argv"] == list(launch.args)
        for name, value in launch.env:
            assert recorded["env"][name] == value, name
        assert recorded["env"]["HF_HOME"] == recipe.runtime.hf_cache
        if key is not None:
            assert recorded["env"]["VLLM_API_KEY"] == key["VLLM_API_KEY"]
            assert key["VLLM_API_KEY"] not in script.read_text()
    assert any(n.launch.secret_env_file for n in ctx.nodes), "the hostile recipe has a proxy"
    no_payload_ran(tmp_path, out)


def test_hostile_values_reach_the_engine(hostile: tuple[Any, Path, Bundle, Path]) -> None:
    """The recipe's own values (not just what the launch derivation made of them) arrive intact."""
    recipe, path, _, _ = hostile
    head = recipe.head.name
    ctx = build_context(recipe, path, load_and_plan(path)[1])
    args = list(next(n.launch.args for n in ctx.nodes if n.name == head))
    start = args.index(HOSTILE_ARGS[0])
    assert args[start : start + len(HOSTILE_ARGS)] == HOSTILE_ARGS
    env = dict(next(n.env for n in ctx.nodes if n.name == head))
    for name, value in HOSTILE_ENV.items():
        assert env[name] == value
    assert env["NCCL_DEBUG"] == NASTY and env["NCCL_DEBUG_SUBSYS"] == NASTY_LINES


def test_node_env_read_by_sh_matches(
    hostile: tuple[Any, Path, Bundle, Path], tmp_path: Path
) -> None:
    """Every variable node.env spells reads back exactly (sh `set -a; .`); those it cannot
    spell for Compose are left out with a comment, and launch.sh sets them."""
    recipe, path, _, out = hostile
    ctx = build_context(recipe, path, load_and_plan(path)[1])
    for n in ctx.nodes:
        env_file = out / n.name / "node.env"
        dump = (
            f"set -a; . {json.dumps(str(env_file))}; set +a; "
            f'{json.dumps(sys.executable)} -c "import json,os; print(json.dumps(dict(os.environ)))"'
        )
        done = subprocess.run(
            ["sh", "-c", dump],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=True,
        )
        read_back = json.loads(done.stdout)
        text = env_file.read_text()
        for name, value in n.env:
            if f"\n{name}=" in text:
                assert read_back[name] == value, name
            else:
                assert f"# {name}: set by launch.sh only" in text
        # the ones that can be spelled are
        for name in ("DOLLARS", "EMPTY", "EQUALS", "PLAIN", "TILDE"):
            assert read_back[name] == HOSTILE_ENV[name]
    no_payload_ran(tmp_path)


def _compose_unescape(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("$$", "$")
    if isinstance(value, list):
        return [_compose_unescape(v) for v in value]
    if isinstance(value, dict):
        return {k: _compose_unescape(v) for k, v in value.items()}
    return value


def test_compose_values_survive_yaml_and_interpolation(
    hostile: tuple[Any, Path, Bundle, Path],
) -> None:
    recipe, path, bundle, _ = hostile
    ctx = build_context(recipe, path, load_and_plan(path)[1])
    data = YAML(typ="safe", pure=True).load(bundle[f"{recipe.head.name}/compose.yaml"])
    service = data["services"]["engine"]
    raw = json.dumps(service)
    # every '$' is doubled: Compose interpolates nothing
    assert "$" not in raw.replace("$$", "")
    service = _compose_unescape(service)
    assert service["image"] == recipe.engine.image
    sources = {v["source"]: v["target"] for v in service["volumes"]}
    assert sources[recipe.runtime.hf_cache] == recipe.runtime.hf_cache
    assert sources[ctx.model] == ctx.model
    assert sources[ctx.layout.cache] == "/root/.cache"


def test_litellm_config_routes_the_exact_names(hostile: tuple[Any, Path, Bundle, Path]) -> None:
    recipe, _, bundle, _ = hostile
    data = YAML(typ="safe", pure=True).load(bundle["cluster/litellm/config.yaml"])
    names = [m["model_name"] for m in data["model_list"]]
    assert names == recipe.model.all_names
    for entry in data["model_list"]:
        assert entry["litellm_params"]["model"] == "hosted_vllm/" + entry["model_name"]
        assert entry["litellm_params"]["api_base"] == "http://10.99.0.1:8000/v1"


def test_run_proxy_reads_the_key_file_at_a_hostile_path(tmp_path: Path) -> None:
    key_dir = tmp_path / "keys$(touch${IFS}PWNED)`id`'q'"
    key_dir.mkdir()
    key_file = key_dir / "master%h;key"
    key_file.write_text("sk-test-key\n")
    data = hostile_recipe_data("models/tiny")
    data["proxy"]["master_key_file"] = str(key_file)
    del data["proxy"]["image"]  # natively: its unit runs run-proxy.sh
    root = tmp_path / "root$(touch${IFS}PWNED)`id`"
    data["runtime"]["root"] = str(root)
    engine_env = root / data["name"] / "secrets" / "engine.env"
    engine_env.parent.mkdir(parents=True)
    engine_env.write_text("VLLM_API_KEY=sk-engine-key\n")
    path = write_hostile_recipe(tmp_path / "recipe", data)
    recipe, plan = load_and_plan(path)
    out = tmp_path / "out"
    render(recipe, path, plan).write(out)
    script = out / "cluster" / "litellm" / "run-proxy.sh"
    # the arguments its unit gives it (what follows `/bin/sh run-proxy.sh` in ExecStart)
    words = exec_start((out / "head.0" / f"deskside-{recipe.name}-proxy.service").read_text())
    assert words[:2] == ["/bin/sh", f"{root}/{recipe.name}/current/cluster/litellm/run-proxy.sh"]
    args = words[2:]
    assert args[:2] == [str(key_file), str(engine_env)]
    done, recorded = run_script(script, tmp_path, args=args)
    assert done.returncode == 0, done.stderr
    assert recorded is not None and recorded["argv0"] == "litellm"
    assert recorded["argv"] == [
        "--config",
        f"{root}/{recipe.name}/current/cluster/litellm/config.yaml",
        "--host",
        "10.99.0.1",
        "--port",
        "4000",
    ]
    assert recorded["env"]["LITELLM_MASTER_KEY"] == "sk-test-key"
    assert recorded["env"]["VLLM_API_KEY"] == "sk-engine-key"  # what the proxy sends on
    assert "sk-test-key" not in done.stdout + done.stderr
    engine_env.unlink()
    done, recorded = run_script(script, tmp_path, args=args)
    assert done.returncode == 1 and recorded is None
    assert f"{engine_env} is missing or unreadable" in done.stderr
    engine_env.write_text("VLLM_API_KEY=sk-engine-key\n")
    key_file.unlink()
    done, recorded = run_script(script, tmp_path, args=args)
    assert done.returncode == 1 and recorded is None
    assert f"{key_file} is missing or unreadable" in done.stderr
    no_payload_ran(tmp_path)


@pytest.mark.parametrize(("node", "tree"), [("ai1", "gb10-head"), ("ai2", "gb10-worker")])
def test_flagship_launch_resolves_the_gid_index_from_sysfs(
    node: str, tree: str, tmp_path: Path
) -> None:
    """RoCE: the rendered launch.sh resolves NCCL_IB_GID_INDEX from the node's sysfs (the
    fabric fixtures of a GB10 head and worker) and hands it to the engine."""
    recipe = load_recipe(FLAGSHIP)
    bundle = render(recipe, FLAGSHIP, load_and_plan(FLAGSHIP)[1])
    bundle.write(tmp_path / "out")
    root = SYSFS / tree / "sys"
    spec = next(n for n in recipe.cluster.nodes if n.name == node)
    assert spec.fabric is not None
    expected = resolve_node(
        read_snapshot(DirSource(root)),
        str(spec.fabric.address),
        list(spec.fabric.hcas),
        spec.fabric.interface,
    )
    done, recorded = run_script(
        tmp_path / "out" / node / "launch.sh",
        tmp_path,
        # the head's engine key as Compose's env_file gives it
        extra_env={"DESKSIDE_SYSFS_ROOT": str(root), "VLLM_API_KEY": "sk-compose"},
    )
    assert done.returncode == 0, done.stderr
    assert recorded is not None
    assert expected.gid_index is not None
    assert recorded["env"]["NCCL_IB_GID_INDEX"] == str(expected.gid_index)
    assert recorded["env"]["NCCL_NET"] == "IB"


def test_flagship_launch_refuses_to_start_without_a_gid(tmp_path: Path) -> None:
    bundle = render(load_recipe(FLAGSHIP), FLAGSHIP, load_and_plan(FLAGSHIP)[1])
    bundle.write(tmp_path / "out")
    done, recorded = run_script(
        tmp_path / "out" / "ai1" / "launch.sh",
        tmp_path,
        extra_env={
            "DESKSIDE_SYSFS_ROOT": str(SYSFS / "port-down" / "sys"),
            "VLLM_API_KEY": "sk-compose",
        },
    )
    assert done.returncode == 1
    assert recorded is None, "the engine must not start with an unresolved GID index"
    assert "refusing to start" in done.stderr


def test_no_secret_env_in_recipes(tmp_path: Path) -> None:
    from deskside.errors import UsageError

    data = hostile_recipe_data("models/tiny")
    data["engine"]["env"] = {"HF_TOKEN": "hf_abc"}
    path = write_hostile_recipe(tmp_path, data)
    with pytest.raises(UsageError, match="HF_TOKEN"):  # refused when the recipe loads
        recipe, plan = load_and_plan(path)
        render(recipe, path, plan)


def test_script_modes(hostile: tuple[Any, Path, Bundle, Path]) -> None:
    _, _, bundle, out = hostile
    for p in bundle:
        executable = p.endswith(".sh")
        assert bool(bundle.mode(p) & 0o111) == executable, p
        assert bool(os.stat(out / p).st_mode & 0o111) == executable, p
