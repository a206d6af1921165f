"""Recipe bounds: the file read, the numbers, the names and text, the credentials."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from deskside.errors import RecipeError
from deskside.home import resolve_recipe
from deskside.recipe.credentials import looks_like_secret, secret_env_name, secret_flag
from deskside.recipe.load import load_recipe, load_recipe_text
from deskside.recipe.source import (
    MAX_FLOW_DEPTH,
    MAX_INDICATORS,
    MAX_LINE_CHARS,
    MAX_LINES,
    MAX_RECIPE_BYTES,
    read_recipe_bytes,
)
from deskside.recipe.text import control_problem

ROOT = Path(__file__).resolve().parents[2]
FLAGSHIP = ROOT / "recipes" / "dual-spark-deepseek-v4-flash.yaml"
TINY = ROOT / "src" / "deskside" / "recipes_data" / "local-tiny.yaml"


def flagship(old: str, new: str) -> str:
    text = FLAGSHIP.read_text()
    assert old in text
    return text.replace(old, new, 1)


def refused(text: str) -> str:
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text, "r.yaml")
    problems = info.value.problems or [info.value]
    return "\n".join(f"{p.message} | {p.hint}" for p in problems)


# --------------------------------------------------------------------------- reading


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "r.yaml")
    t0 = time.monotonic()
    with pytest.raises(RecipeError, match="named pipe"):
        read_recipe_bytes(tmp_path / "r.yaml")
    assert time.monotonic() - t0 < 1


def test_devices_and_folders_are_refused(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="character device"):
        read_recipe_bytes("/dev/zero")
    with pytest.raises(RecipeError, match="a folder"):
        read_recipe_bytes(tmp_path)


def test_sparse_file_is_refused_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(3 * 1024**3)
    with pytest.raises(RecipeError, match="too large") as info:
        read_recipe_bytes(big)
    assert info.value.location is not None and info.value.location.line == 1
    assert info.value.exit_code == 2


def test_links_are_followed_to_a_regular_file_only(tmp_path: Path) -> None:
    (tmp_path / "ok.yaml").symlink_to(FLAGSHIP)
    assert read_recipe_bytes(tmp_path / "ok.yaml") == FLAGSHIP.read_bytes()
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    with pytest.raises(RecipeError, match="links to /dev/zero"):
        read_recipe_bytes(tmp_path / "zero.yaml")
    (tmp_path / "a.yaml").symlink_to(tmp_path / "b.yaml")
    (tmp_path / "b.yaml").symlink_to(tmp_path / "a.yaml")
    with pytest.raises(RecipeError, match="never reaches a file"):
        read_recipe_bytes(tmp_path / "a.yaml")


def test_resolve_recipe_reads_what_exists_as_a_recipe_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "local-tiny")
    with pytest.raises(RecipeError, match="named pipe"):
        resolve_recipe(tmp_path / "local-tiny", make_model=False)


def test_a_file_at_the_size_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_bytes(b"#" * 100 + b"\n" + b"\n" * (MAX_RECIPE_BYTES - 101))
    assert len(read_recipe_bytes(path)) == MAX_RECIPE_BYTES
    path.write_bytes(b"\n" * (MAX_RECIPE_BYTES + 1))
    with pytest.raises(RecipeError, match="too large"):
        load_recipe(path)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("\n" * (MAX_LINES + 1), "lines"),
        ("# " + "x" * MAX_LINE_CHARS + "\n", f"longer than {MAX_LINE_CHARS}"),
        ("a: [" + "1, " * MAX_INDICATORS + "]\n", "YAML indicators"),
        ("a: " + "[" * (MAX_FLOW_DEPTH + 1) + "]" * (MAX_FLOW_DEPTH + 1), "brackets"),
    ],
)
def test_text_bounds_refuse_before_parsing(text: str, fragment: str) -> None:
    t0 = time.monotonic()
    assert fragment in refused(text)
    assert time.monotonic() - t0 < 0.5


def test_text_bound_is_located_at_the_line_that_passes_it() -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe_text("name: x\n" + "- a\n" * (MAX_INDICATORS + 5), "r.yaml")
    assert info.value.location is not None
    assert info.value.location.line == MAX_INDICATORS + 1


# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        ("max_model_len: 204800", "max_model_len: " + "1" + "0" * 30, "longer than any model"),
        ("max_model_len: 204800", "max_model_len: 16777217", "at most 16777216"),
        ("max_num_seqs: 6 ", "max_num_seqs: 1000000000000 ", "at most 65536"),
        ("max_num_batched_tokens: 16384", "max_num_batched_tokens: 16777217", "at most"),
        ("num_speculative_tokens: 5", "num_speculative_tokens: 100000000000", "at most 32"),
        ("tensor_parallel_size: 2 ", "tensor_parallel_size: 1025 ", "at most 1024"),
        ("nnodes: 2 ", "nnodes: 65 ", "at most 64"),
        ("gpus: 1                    # one", "gpus: 17 #", "at most 16"),
        ("shm_size: 64g ", "shm_size: 65t ", "more memory than any machine"),
        ("scrape_interval: 15s", "scrape_interval: 25h", "longer than a day"),
        ("gpu_memory_utilization: 0.82", "gpu_memory_utilization: 1.5", "at most 1"),
    ],
)
def test_numbers_out_of_range_are_refused_at_their_key(old: str, new: str, fragment: str) -> None:
    assert fragment in refused(flagship(old, new))


@pytest.mark.parametrize("size", [1, 2, 3, 7, 8, 100, 512])
def test_block_sizes_vllm_backends_do_not_take_are_refused(size: int) -> None:
    assert "16, 32, 64, 128, 256" in refused(flagship("block_size: 256 ", f"block_size: {size} "))


@pytest.mark.parametrize("size", [16, 32, 64, 128, 256])
def test_block_sizes_vllm_backends_take_are_kept(size: int) -> None:
    recipe = load_recipe_text(flagship("block_size: 256 ", f"block_size: {size} "))
    assert recipe.engine.block_size == size


def test_cpu_kvcache_space_is_whole_gib() -> None:
    text = TINY.read_text().replace(
        'HF_HUB_OFFLINE: "1"', 'HF_HUB_OFFLINE: "1"\n    VLLM_CPU_KVCACHE_SPACE: "4G"'
    )
    assert "whole number of GiB" in refused(text)
    ok = load_recipe_text(text.replace('"4G"', '"4"'))
    assert ok.engine.env["VLLM_CPU_KVCACHE_SPACE"] == "4"


# --------------------------------------------------------------------------- text


@pytest.mark.parametrize("char", ["\x00", "\x1b", "\x7f", "\r", "\x85", "\x01"])
def test_control_characters_are_found(char: str) -> None:
    assert control_problem(f"a{char}b") is not None
    assert control_problem(f"a{char}b", lines=True) is not None


def test_tab_and_newline_are_allowed_in_free_text_only() -> None:
    assert control_problem("a\tb\nc", lines=True) is None
    assert control_problem("a\tb") is not None


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        ("served_name: deepseek-v4-flash", 'served_name: "a\\0b"', "U+0000 (NUL)"),
        ("served_name: deepseek-v4-flash", 'served_name: "a\\eb"', "U+001B (ESC)"),
        ("served_name: deepseek-v4-flash", "served_name: --port=1", "starts with '-'"),
        ("served_name: deepseek-v4-flash", "served_name: " + "n" * 129, "1 to 128"),
        ("aliases: [deepseek-v4-flash-0731]", "aliases: [-x]", "starts with '-'"),
        ("DEFAULT_THINKING: max", 'DEFAULT_THINKING: "\\e[2J"', "U+001B"),
        ("DEFAULT_THINKING: max", "DEFAULT_THINKING: " + "x" * 4097, "too long"),
        ("DEFAULT_THINKING: max", "A" * 129 + ": max", "environment variable name"),
        ("- --enable-auto-tool-choice", '- "--x\\0"', "U+0000"),
        ("image: ghcr.io", "image: -ghcr.io", "starts with '-'"),
        ("  root: /opt/deskside", '  root: "/opt/\\eds"', "U+001B"),
    ],
)
def test_names_and_text_are_plain_and_bounded(old: str, new: str, fragment: str) -> None:
    assert fragment in refused(flagship(old, new))


def test_hostile_but_printable_text_stays_allowed() -> None:
    recipe = load_recipe_text(
        flagship("DEFAULT_THINKING: max", "DEFAULT_THINKING: \"line\\n\\tnext $(x) 'q'\"")
    )
    assert recipe.engine.env["DEFAULT_THINKING"] == "line\n\tnext $(x) 'q'"


@pytest.mark.parametrize(
    ("host", "fragment"),
    [
        ("http://192.168.0.27", "is a URL"),
        ("192.168.0.27/v1", "is a URL"),
        ("192.168.0.27:8888", "holds ':'"),
        ("300.1.1.1", "not a valid IPv4"),
        ("-x", "neither an IPv4 address nor a hostname"),
    ],
)
def test_engine_host_is_an_address(host: str, fragment: str) -> None:
    text = flagship("  port: 8888 ", f"  host: {host!r}\n  port: 8888 ")
    assert fragment in refused(text)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.0.27", "ai1.lan"])
def test_engine_host_keeps_addresses_and_wildcards(host: str) -> None:
    text = flagship("  port: 8888 ", f"  host: {host!r}\n  port: 8888 ")
    assert load_recipe_text(text).engine.host == host


# --------------------------------------------------------------------------- credentials


@pytest.mark.parametrize(
    ("arg", "flag"),
    [
        ("--api-key", "--api-key"),
        ("--api-key=sk-x", "--api-key"),
        ("--hf-token", "--hf-token"),
        ("--hf_token=x", "--hf_token"),
        ("--db-password", "--db-password"),
        ("--client-secret", "--client-secret"),
    ],
)
def test_secret_flags(arg: str, flag: str) -> None:
    assert secret_flag(arg) == flag


@pytest.mark.parametrize(
    "arg", ["--tokenizer-mode", "--max-num-batched-tokens", "--enable-prompt-tokens-details"]
)
def test_flags_merely_about_tokens_are_not_secrets(arg: str) -> None:
    assert secret_flag(arg) is None


def test_secret_env_names_and_values() -> None:
    assert secret_env_name("HF_TOKEN") and secret_env_name("VLLM_API_KEY")
    assert secret_env_name("AWS_SECRET_ACCESS_KEY")
    assert not secret_env_name("TOKENIZERS_PARALLELISM")
    assert looks_like_secret("hf_" + "a" * 34) and looks_like_secret("sk-" + "b" * 30)
    assert not looks_like_secret("deepseek_v4")


def test_api_key_in_extra_args_points_at_the_proxy() -> None:
    out = refused(flagship("    - --enable-auto-tool-choice", "    - --api-key=abc"))
    assert "--api-key puts a credential" in out
    assert "proxy.enabled" in out and "proxy.master_key_file" in out


def test_hf_token_in_env_points_at_hf_login() -> None:
    out = refused(flagship("DEFAULT_THINKING: max", "HF_TOKEN: abc"))
    assert "HF_TOKEN is a credential" in out and "hf auth login" in out


def test_secret_in_nccl_env_is_refused() -> None:
    text = flagship(
        "NCCL_IB_ADDR_FAMILY: AF_INET", "NCCL_IB_ADDR_FAMILY: AF_INET\n      X_PASSWORD: y"
    )
    assert "X_PASSWORD is a credential" in refused(text)


def test_shipped_recipes_stay_valid() -> None:
    assert load_recipe(FLAGSHIP).engine.block_size == 256
    assert load_recipe(TINY).model.served_name == "deepseek-v4-flash-tiny"
