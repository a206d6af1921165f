"""Secrets never enter a diagnosis bundle: known values and credential-shaped values are
replaced in every text, secret files are dropped by name, and ordinary engine words
(--max-num-batched-tokens, --tokenizer-mode, kv_cache_usage) are left alone."""

from __future__ import annotations

import json

import pytest

from deskside.diagnose.scrub import REDACTED, Scrubber, dropped, secret_values

HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
SK = "sk-" + "Zx9_Yw8-Vu7Ts6Rq5Po4Nm3Lk2"
ENGINE_KEY = "q8Vf2LmN0pRs7TuW"  # no shape: only known-secret scrubbing finds it


def scrub(text: str, *known: str) -> str:
    s = Scrubber()
    s.add(known)
    return s.scrub(text)[0]


def test_known_secrets_are_replaced_wherever_they_appear() -> None:
    text = f"key {ENGINE_KEY} again{ENGINE_KEY}\n{{'k': '{ENGINE_KEY}'}}"
    s = Scrubber()
    s.add([ENGINE_KEY, "  ", "abc"])  # blanks and very short values are not known secrets
    out, count = s.scrub(text)
    assert ENGINE_KEY not in out and out.count(REDACTED) == 3 and count == 3
    assert s.known == {ENGINE_KEY}


def test_a_longer_secret_containing_a_shorter_one_goes_whole() -> None:
    out = scrub("token=AAAA1111BBBB ok", "AAAA1111", "AAAA1111BBBB")
    assert "BBBB" not in out and "1111" not in out


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("Authorization: Bearer abc.def-ghi", "Authorization: Bearer "),
        ("curl -H 'authorization: basic dXNlcjpwYXNz'", "authorization: basic "),
        ("VLLM_API_KEY=abc123 vllm serve", "VLLM_API_KEY="),
        ("export HF_TOKEN=abcdef; echo", "export HF_TOKEN="),
        ("LITELLM_MASTER_KEY=xyz", "LITELLM_MASTER_KEY="),
        ("AWS_SECRET_ACCESS_KEY=xyz", "AWS_SECRET_ACCESS_KEY="),
        ("DB_PASSWORD=hunter22", "DB_PASSWORD="),
        ('{"api_key": "abc\\"def", "x": 1}', '{"api_key": "'),
        ('"HF_TOKEN":"abc"', '"HF_TOKEN":"'),
        ("  master_key: s3cr3tvalue", "  master_key: "),
        ("api_key: 'quoted value'", "api_key: "),
        ("vllm serve m --api-key abcdef --port 1", "--api-key "),
        ("vllm serve m --api-key=abcdef", "--api-key="),
        ("hf download --token abcdef", "--token "),
    ],
)
def test_credential_patterns(text: str, kept: str) -> None:
    out = scrub(text)
    assert kept in out and REDACTED in out, out
    for word in ("abc123", "abcdef", "xyz", "hunter22", 'abc\\"def', "s3cr3tvalue", "quoted"):
        assert word not in out, out
    if "--port 1" in text:
        assert out.endswith("--port 1")


def test_credential_shaped_values_anywhere() -> None:
    out = scrub(f"loaded {HF} from cache; proxy key {SK}.")
    assert HF not in out and SK not in out
    assert out == f"loaded {REDACTED} from cache; proxy key {REDACTED}."


def test_private_keys_go_whole() -> None:
    pem = (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNz\naGtleQ==\n-----END OPENSSH PRIVATE KEY-----"
    )
    out = scrub(f"before\n{pem}\nafter")
    assert "b3BlbnNz" not in out and out == f"before\n{REDACTED}\nafter"


@pytest.mark.parametrize(
    "text",
    [
        "vllm serve m --max-num-batched-tokens 8192 --tokenizer-mode auto",
        "max_num_batched_tokens=8192 kv_cache_usage=0.25",
        '{"max_tokens": 100, "prompt_tokens": 5, "token_budget": 3}',
        "disk-usage 12% sk-short",
        'vllm:generation_tokens_total{engine="0"} 1000.0',
        "--api-key --port 8000",  # a flag without its value: the next flag is not a value
    ],
)
def test_ordinary_engine_words_are_left_alone(text: str) -> None:
    assert scrub(text) == text


@pytest.mark.parametrize(
    "name",
    [
        "nodes/node0/engine.env",
        "nodes/node0/.env",
        "nodes/node0/node.env",
        "cluster/.env.local",
        "nodes/node0/secrets/anything.txt",
        "nodes/node0/proxy-master-key",
        "nodes/node0/token",
        "nodes/node0/server.key",
        "nodes/node0/cert.pem",
        "nodes/node0/id_ed25519",
        "nodes/node0/.netrc",
    ],
)
def test_secret_files_are_dropped(name: str) -> None:
    assert dropped(name) is not None


@pytest.mark.parametrize(
    "name",
    [
        "nodes/node0/engine.log",
        "nodes/node0/processes.txt",
        "nodes/node0/state.json",
        "cluster/deskside.lock",
        "cluster/environment.json",
        "MANIFEST.json",
    ],
)
def test_diagnosis_members_are_kept(name: str) -> None:
    assert dropped(name) is None


def test_secret_values_of_files_deskside_writes() -> None:
    text = f"VLLM_API_KEY={ENGINE_KEY}\n\n# comment\n{SK}\n[default]\nhf_token = {HF}\n"
    assert secret_values(text) == [ENGINE_KEY, SK, "[default]", HF]


def test_json_stays_json() -> None:
    command = 'sh -c "echo \\"VLLM_API_KEY=$KEY\\"" --api-key abcdef'
    doc = {
        "command": command,
        "env": {"HF_TOKEN": "plain", "VLLM_API_KEY": "", "max_num_batched_tokens": "8192"},
        "list": [f"see {ENGINE_KEY}", 3, None],
        ENGINE_KEY: True,
    }
    s = Scrubber()
    s.add([ENGINE_KEY])
    done = s.scrub_json(json.dumps(doc))
    assert done is not None
    text, count = done
    back = json.loads(text)
    assert back["env"] == {
        "HF_TOKEN": REDACTED,
        "VLLM_API_KEY": "",
        "max_num_batched_tokens": "8192",
    }
    assert back["list"] == [f"see {REDACTED}", 3, None] and back[REDACTED] is True
    assert "abcdef" not in text and back["command"].endswith(f"--api-key {REDACTED}")
    assert f'VLLM_API_KEY={REDACTED}\\"' in back["command"] and count == 5
    assert s.scrub_json("not json {") is None


def test_a_secret_straddling_the_size_cut_is_scrubbed_whole() -> None:
    """The bundle cuts a log to its size after scrubbing it: a secret that straddles the
    cut leaves nothing of itself behind (the collected text carries a margin)."""
    from deskside.diagnose.bundle import scrubbed
    from deskside.diagnose.manifest import Member
    from deskside.diagnose.node import MAX_LOG_BYTES, cap

    secret = "Zq7" * 20  # a known secret of the run, no credential shape
    tail = "y" * (MAX_LOG_BYTES - 30)
    log = "x" * 1000 + "key " + secret + "\n" + tail
    collected = cap(log)  # what the node collector keeps
    assert secret in collected
    scrubber = Scrubber()
    scrubber.add([secret])
    (member,) = scrubbed([Member(f"node0/{secret}.log", "node0: tail", collected)], scrubber)
    assert member.text is not None and len(member.text.encode()) <= MAX_LOG_BYTES
    assert all(secret[i : i + 6] not in member.text for i in range(len(secret) - 6))
    assert secret not in member.name and member.name.startswith("node0/")
