"""The rendered LiteLLM proxy, run for real (litellm[proxy] 1.108.5 from its own venv,
`.venv-proxy`, made by scripts/bootstrap): it starts as its service says (the rendered
`run-proxy.sh` given the key files), with the key read from its 0600 file, routes the
served name and every alias to the head's OpenAI-compatible server (here deskside's
synthetic server, which like vLLM requires the engine's own key on /v1), sends that key
from the head's engine.env, and refuses a request without the master key."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deskside.bench.synthetic import Behaviour, ThreadedServer, start_in_thread
from deskside.engine.services import ServiceSite, services
from deskside.planner.inputs import plan_recipe
from deskside.recipe.load import load_recipe
from deskside.render.assemble import render
from deskside.tiny import write_tiny_model

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
PROXY_BIN = Path(os.environ.get("DESKSIDE_PROXY_VENV", ROOT / ".venv-proxy")) / "bin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


ENGINE_KEY = "sk-engine-" + os.urandom(8).hex()


@pytest.fixture
def upstream() -> Iterator[ThreadedServer]:
    # the engine behind the proxy takes /v1 requests only with its own key, as vLLM does
    server = start_in_thread(Behaviour(api_key=ENGINE_KEY))
    try:
        yield server
    finally:
        server.stop()


def test_rendered_proxy_routes_every_alias(tmp_path: Path, upstream: ThreadedServer) -> None:
    assert (PROXY_BIN / "litellm").exists(), f"litellm is not installed in {PROXY_BIN}"
    recipe_path = tmp_path / "proxied.yaml"
    recipe_path.write_text((ROOT / "src/deskside/recipes_data/local-tiny.yaml").read_text())
    loaded = load_recipe(recipe_path)
    head = loaded.cluster.nodes[0].model_copy(
        update={"netns": None, "address": "127.0.0.1", "fabric": None}
    )
    proxy_port = free_port()
    recipe = loaded.model_copy(
        update={
            "cluster": loaded.cluster.model_copy(update={"nodes": [head]}),
            "engine": loaded.engine.model_copy(
                update={
                    "tensor_parallel_size": 1,
                    "nnodes": 1,
                    "host": "127.0.0.1",
                    "port": upstream.port,
                }
            ),
            "runtime": loaded.runtime.model_copy(update={"root": str(tmp_path / "root")}),
            "proxy": loaded.proxy.model_copy(update={"enabled": True, "port": proxy_port}),
        }
    )
    write_tiny_model("deepseek-v3", Path(recipe.model.path or ""))
    bundle = render(recipe, recipe_path, plan_recipe(recipe, recipe_path))
    # the head's release, where the proxy's service finds the bundle's cluster files
    out = Path(recipe.runtime.root) / recipe.name / "current"
    for path in bundle:
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(bundle[path])
        target.chmod(bundle.mode(path))
    key = "sk-test-" + os.urandom(8).hex()
    key_file = Path(recipe.runtime.root) / recipe.name / "secrets" / "proxy-master-key"
    key_file.parent.mkdir(parents=True, exist_ok=True)
    key_file.write_text(key)
    key_file.chmod(0o600)
    engine_env = key_file.parent / "engine.env"
    engine_env.write_text(f"VLLM_API_KEY={ENGINE_KEY}\n")
    engine_env.chmod(0o600)
    env = {**os.environ, "PATH": f"{PROXY_BIN}:{os.environ['PATH']}"}
    log = (tmp_path / "proxy.log").open("wb")
    (proxy,) = [s for s in services(recipe, ServiceSite.deployed(recipe)) if s.name == "proxy"]
    assert proxy.argv[:2] == ("/bin/sh", str(out / "cluster/litellm/run-proxy.sh"))
    proc = subprocess.Popen(
        list(proxy.argv),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{proxy_port}"
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
        with httpx.Client(timeout=60) as client:
            auth = {"Authorization": f"Bearer {key}"}
            for name in recipe.model.all_names:
                body = {
                    "model": name,
                    "messages": [{"role": "user", "content": "hello"}],
                    "max_tokens": 5,
                    "stream": True,
                }
                text = ""
                with client.stream(
                    "POST", f"{url}/v1/chat/completions", json=body, headers=auth
                ) as r:
                    assert r.status_code == 200, r.read()
                    for line in r.iter_lines():
                        if line.startswith("data: ") and line != "data: [DONE]":
                            for choice in json.loads(line[6:]).get("choices", []):
                                text += choice.get("delta", {}).get("content") or ""
                assert text, f"no content streamed through the proxy for {name!r}"
            forwarded = len(upstream.server.sent)
            assert forwarded == len(recipe.model.all_names)  # each with the engine's key
            # the engine itself refuses a request without its key (the proxy is the door)
            engine = f"http://127.0.0.1:{upstream.port}/v1/chat/completions"
            assert client.post(engine, json=body).status_code == 401
            # without the key the proxy refuses (LiteLLM 1.108.5 answers 500 from its auth
            # handler without a database, 401 with one) and forwards nothing
            denied = client.post(f"{url}/v1/chat/completions", json=body)
            assert denied.status_code in (401, 403, 500)
            assert len(upstream.server.sent) == forwarded
        # neither key is in a rendered file
        assert all(key.encode() not in bundle[p] for p in bundle)
        assert all(ENGINE_KEY.encode() not in bundle[p] for p in bundle)
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
