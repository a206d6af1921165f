"""The replica set's rendered proxy, run for real (LiteLLM 1.108.5 from `.venv-proxy`)
with `proxy/run-proxy.sh` and its drain gate (`deskside.replicas.gate`), in front of two
engines (deskside's synthetic OpenAI server, which
like vLLM requires its own key on /v1) on two loopback addresses: every served name and
alias reaches both groups, each with its own key; with one group gone, every request still
succeeds through the other (retry, then cooldown)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deskside.bench.synthetic import Behaviour, ThreadedServer, start_in_thread
from deskside.recipe.groups import group_recipes
from deskside.recipe.load import load_recipe_text
from deskside.replicas.gate import gate_argv, gate_files
from deskside.replicas.place import ProxyPlace
from deskside.replicas.plans import plan_set
from deskside.replicas.proxy import engines_env_text, set_proxy
from deskside.replicas.render import proxy_files
from deskside.tiny import write_tiny_model

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
PROXY_BIN = Path(os.environ.get("DESKSIDE_PROXY_VENV", ROOT / ".venv-proxy")) / "bin"
KEYS = {"a": "sk-a-" + os.urandom(6).hex(), "b": "sk-b-" + os.urandom(6).hex()}
HEADS = {"a": "127.0.0.2", "b": "127.0.0.3"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def recipe_text(model: Path, engine_port: int, proxy_port: int) -> str:
    def node(name: str, address: str, role: str) -> str:
        return f"    - {{name: {name}, address: {address}, role: {role}, hardware: cpu}}\n"

    return (
        "version: 1\nname: rp\ncluster:\n  nodes:\n"
        + node("a0", HEADS["a"], "head")
        + node("a1", "127.0.0.12", "worker")
        + node("b0", HEADS["b"], "head")
        + node("b1", "127.0.0.13", "worker")
        + f"""\
replicas:
  groups:
    - {{name: a, nodes: [a0, a1]}}
    - {{name: b, nodes: [b0, b1]}}
  routing_strategy: simple-shuffle
  num_retries: 3
  allowed_fails: 0
  cooldown_time: 60
  timeout: 10
  health_check_interval: 0
model: {{path: {model}, served_name: tiny, aliases: [tiny-alias]}}
engine:
  vllm_version: "0.32.0"
  device: cpu
  tensor_parallel_size: 2
  nnodes: 2
  port: {engine_port}
  kv_cache_memory: 1GiB
  max_model_len: 1024
  load_format: dummy
runtime: {{kind: native}}
proxy: {{enabled: true, port: {proxy_port}}}
"""
    )


@pytest.fixture
def engines() -> Iterator[tuple[int, dict[str, ThreadedServer]]]:
    port = free_port()
    servers = {
        g: start_in_thread(Behaviour(api_key=KEYS[g], model="tiny"), host=HEADS[g], port=port)
        for g in HEADS
    }
    try:
        yield port, servers
    finally:
        for server in servers.values():
            server.stop()


def test_set_proxy_spreads_and_survives_a_lost_group(
    tmp_path: Path, engines: tuple[int, dict[str, ThreadedServer]]
) -> None:
    assert (PROXY_BIN / "litellm").exists(), f"litellm is not installed in {PROXY_BIN}"
    engine_port, servers = engines
    model = tmp_path / "tiny"
    write_tiny_model("llama", model)
    proxy_port = free_port()
    recipe_path = tmp_path / "rp.yaml"
    recipe_path.write_text(recipe_text(model, engine_port, proxy_port))
    recipe = load_recipe_text(recipe_path.read_text(), str(recipe_path))
    folder = tmp_path / "proxy"
    folder.mkdir()
    for name, (text, mode) in proxy_files(recipe, plan_set(recipe, recipe_path), "rp.yaml").items():
        (folder / name).write_text(text)
        (folder / name).chmod(mode)
    master = "sk-master-" + os.urandom(8).hex()
    (tmp_path / "master").write_text(master + "\n")
    (tmp_path / "engines.env").write_bytes(engines_env_text(KEYS))
    for f in ("master", "engines.env"):
        (tmp_path / f).chmod(0o600)
    place = ProxyPlace(None, str(folder), str(tmp_path), str(tmp_path / "master"), str(tmp_path))
    groups = group_recipes(recipe)
    for name, (text, mode) in gate_files(recipe, groups, place).items():
        (folder / name).write_text(text)
        (folder / name).chmod(mode)
    gate = subprocess.Popen(
        gate_argv(place, str(PROXY_BIN / "litellm")),
        stdout=(tmp_path / "gate.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log = (tmp_path / "proxy.log").open("wb")
    proxy = set_proxy(  # as the set's start runs it
        recipe,
        groups,
        node=recipe.head.name,
        folder=str(folder),
        master_key=str(tmp_path / "master"),
        keys_file=str(tmp_path / "engines.env"),
        litellm=str(PROXY_BIN / "litellm"),
    )
    proc = subprocess.Popen(
        list(proxy.argv),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://{HEADS['a']}:{proxy_port}"  # the first group's head
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "proxy.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "proxy did not start"
            try:
                if httpx.get(f"{url}/health/liveliness", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        auth = {"Authorization": f"Bearer {master}"}
        with httpx.Client(timeout=60, headers=auth) as client:

            def ask(name: str) -> httpx.Response:
                # the synthetic engine streams, as the bench uses vLLM
                body = {
                    "model": name,
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 3,
                    "stream": True,
                }
                with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
                    r.read()
                    return r

            answers = [ask(("tiny", "tiny-alias")[i % 2]) for i in range(16)]
            assert [r.status_code for r in answers] == [200] * 16, answers[0].text
            per_group = {g: len(s.server.sent) for g, s in servers.items()}
            assert all(n >= 1 for n in per_group.values()), per_group  # both groups served
            assert sum(per_group.values()) == 16
            # LiteLLM reaches each group through its port of the drain gate
            bases = {r.headers.get("x-litellm-model-api-base") for r in answers}
            assert bases == {f"http://{HEADS['a']}:{proxy_port + i}/v1" for i in (1, 2)}, bases
            # group b is lost: every request still succeeds, through group a
            servers.pop("b").stop()  # the fixture stops the others
            before = len(servers["a"].server.sent)
            answers = [ask("tiny") for _ in range(8)]
            assert [r.status_code for r in answers] == [200] * 8, [r.text[:200] for r in answers]
            assert len(servers["a"].server.sent) - before == 8
    finally:
        for p in (proc, gate):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
