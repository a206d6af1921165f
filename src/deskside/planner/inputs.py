"""Build planner inputs from a recipe or from command-line flags, and find the model's
config.json. This is the edge around the pure planner: it reads files."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deskside.errors import ModelConfigError, UsageError
from deskside.hardware import PROFILES, HardwareProfile, get_profile
from deskside.hostcpu import this_machine_amx
from deskside.planner.config_file import located, read_config_json
from deskside.planner.engine_config import version_note
from deskside.planner.plan import Plan, PlanInput, plan
from deskside.planner.registry import read_arch
from deskside.planner.types import EngineRequest, ModelArch, Speculative

if TYPE_CHECKING:
    from deskside.recipe.types import Recipe


@dataclass(frozen=True)
class Overrides:
    """Flags that override a recipe's engine values (None = keep the recipe's)."""

    device: str | None = None
    hardware: str | None = None
    kv_cache_memory: int | None = None
    max_model_len: int | str | None = None  # int or "auto"
    tensor_parallel_size: int | None = None
    kv_cache_dtype: str | None = None
    speculative: dict[str, Any] | None = None
    gpu_memory_utilization: float | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    block_size: int | None = None
    vllm_version: str | None = None  # plan for this release's accounting


def hf_cache_config(repo: str, revision: str | None) -> Path | None:
    """config.json of `repo` at `revision` in the local Hugging Face cache, if present."""
    home = Path(
        os.environ.get("HF_HUB_CACHE")
        or Path(os.environ.get("HF_HOME", "~/.cache/huggingface")) / "hub"
    )
    snapshots = home.expanduser() / f"models--{repo.replace('/', '--')}" / "snapshots"
    if revision:
        candidate = snapshots / revision / "config.json"
        return candidate if candidate.is_file() else None
    return None


def recipe_model_config(recipe: Recipe, recipe_path: Path) -> tuple[dict[str, Any], str]:
    """The model's config.json for a recipe and where it came from: the checkpoint's own
    (local folder, or the Hugging Face cache at the pinned revision) wins over the copy
    shipped beside the recipe."""
    base = recipe_path.parent
    m = recipe.model
    if m.path:
        candidate = (base / m.path).expanduser() / "config.json"
        if candidate.is_file():
            return read_config_json(candidate), str(candidate)
    if m.repo and (cached := hf_cache_config(m.repo, m.revision)) is not None:
        return read_config_json(cached), str(cached)
    if m.config:
        candidate = (base / m.config).expanduser()
        return read_config_json(candidate), str(candidate)
    where = f"{m.path}/config.json" if m.path else f"{m.repo}@{m.revision} in the HF cache"
    hint = "set model.config to a config.json beside the recipe to plan offline"
    if m.path and recipe.engine.load_format == "dummy":
        hint = "create the model first: deskside model tiny --arch deepseek-v3 --out " + m.path
    raise ModelConfigError(f"no config.json found ({where})", hint=hint)


def _speculative(data: dict[str, Any] | None) -> Speculative | None:
    if not data:
        return None
    try:
        return Speculative(str(data["method"]), int(data["num_speculative_tokens"]))
    except (KeyError, TypeError, ValueError):
        raise UsageError(
            "speculative config needs 'method' and 'num_speculative_tokens'",
            hint='e.g. --speculative \'{"method": "mtp", "num_speculative_tokens": 3}\'',
        ) from None


def _max_len(value: int | str | None) -> int | None:
    if value is None or value == "auto":
        return None
    return int(value)


def request_from_recipe(recipe: Recipe, hw: HardwareProfile, o: Overrides) -> EngineRequest:
    e = recipe.engine
    # Booleans the recipe leaves at their default stay None (vLLM's default), so that only
    # settings the recipe makes can be reported as having no effect.
    explicit = e.model_fields_set
    spec = None
    if e.speculative is not None:
        spec = Speculative(e.speculative.method, e.speculative.num_speculative_tokens)
    req = EngineRequest(
        device=e.device,
        tensor_parallel_size=e.tensor_parallel_size,
        pipeline_parallel_size=e.pipeline_parallel_size,
        data_parallel_size=e.data_parallel_size,
        enable_expert_parallel=e.enable_expert_parallel,
        kv_cache_dtype=e.kv_cache_dtype,
        block_size=e.block_size,
        max_model_len=_max_len(e.max_model_len),
        max_num_batched_tokens=e.max_num_batched_tokens,
        max_num_seqs=e.max_num_seqs,
        gpu_memory_utilization=e.gpu_memory_utilization,
        kv_cache_memory=e.kv_cache_memory,
        speculative=spec,
        enable_chunked_prefill=(
            e.enable_chunked_prefill if "enable_chunked_prefill" in explicit else None
        ),
        enable_prefix_caching=(
            e.enable_prefix_caching if "enable_prefix_caching" in explicit else None
        ),
        async_scheduling=e.async_scheduling,
        enforce_eager=e.enforce_eager,
        vllm_version=e.vllm_version,
        device_total_bytes=hw.total_bytes,
        env=dict(e.env),
    )
    return apply_overrides(req, o)


def with_cpu_features(
    req: EngineRequest, hw: HardwareProfile, result_notes: list[str]
) -> EngineRequest:
    """On CPU, whether the CPU has AMX tiles: the hardware profile says, or (profile
    `cpu`) this machine's CPU, which is where a recipe's CPU nodes run."""
    if req.device != "cpu":
        return req
    amx = hw.cpu_amx
    where = f"hardware profile {hw.name}"
    if amx is None:
        amx = this_machine_amx()
        where = "this machine's /proc/cpuinfo"
    result_notes.append(
        f"CPU {'with' if amx else 'without'} AMX tiles ({where}): vLLM's "
        + ("AMX kernels" if amx else "reference kernels")
    )
    return replace(req, cpu_amx=amx)


def apply_overrides(req: EngineRequest, o: Overrides) -> EngineRequest:
    changes: dict[str, Any] = {}
    if o.device is not None:
        changes["device"] = o.device
    if o.kv_cache_memory is not None:
        changes["kv_cache_memory"] = o.kv_cache_memory
        changes["gpu_memory_utilization"] = None
    if o.max_model_len is not None:
        changes["max_model_len"] = _max_len(o.max_model_len)
    if o.tensor_parallel_size is not None:
        changes["tensor_parallel_size"] = o.tensor_parallel_size
    if o.kv_cache_dtype is not None:
        changes["kv_cache_dtype"] = o.kv_cache_dtype
    if o.speculative is not None:
        changes["speculative"] = _speculative(o.speculative)
    if o.gpu_memory_utilization is not None:
        changes["gpu_memory_utilization"] = o.gpu_memory_utilization
        changes["kv_cache_memory"] = None
    if o.max_num_batched_tokens is not None:
        changes["max_num_batched_tokens"] = o.max_num_batched_tokens
    if o.max_num_seqs is not None:
        changes["max_num_seqs"] = o.max_num_seqs
    if o.block_size is not None:
        changes["block_size"] = o.block_size
    if o.vllm_version is not None:
        if not VERSION.fullmatch(o.vllm_version):
            raise UsageError(
                f"--vllm-version {o.vllm_version!r} is not a vLLM release",
                hint="give MAJOR.MINOR or MAJOR.MINOR.PATCH, e.g. 0.32.0",
            )
        changes["vllm_version"] = o.vllm_version
    return replace(req, **changes)


VERSION = re.compile(r"\d{1,3}\.\d{1,3}(\.\d{1,4})?([.+-][A-Za-z0-9.+-]{1,40})?")


def _hardware(name: str | None, device: str) -> HardwareProfile:
    if name is None:
        return get_profile("cpu" if device == "cpu" else "h100-80gb")
    if name not in PROFILES:
        raise UsageError(f"unknown hardware profile {name!r}", hint="known: " + ", ".join(PROFILES))
    return PROFILES[name]


def plan_recipe(recipe: Recipe, recipe_path: Path, o: Overrides | None = None) -> Plan:
    config, source = recipe_model_config(recipe, recipe_path)
    return plan_recipe_arch(recipe, arch_from_config(config, source), source, o)


def plan_recipe_arch(
    recipe: Recipe, arch: ModelArch, source: str, o: Overrides | None = None
) -> Plan:
    """`plan_recipe` with the model's architecture already read from `source` (a tuner
    plans many points of one recipe and reads its config.json once)."""
    o = o or Overrides()
    hw = _hardware(o.hardware or recipe.head.hardware, o.device or recipe.engine.device)
    notes: list[str] = []
    req = with_cpu_features(request_from_recipe(recipe, hw, o), hw, notes)
    result = plan(
        PlanInput(
            arch=arch,
            request=req,
            hardware=hw,
            weights_format=recipe.model.weights_format,
            min_headroom=recipe.guard.min_headroom,
            node_names=tuple(n.name for n in recipe.cluster.nodes),
        )
    )
    notes += [n for n in [version_note(req.vllm_version)] if n]
    result.assumptions[:0] = [f"model config: {source}", *arch.notes, *notes]
    return result


def plan_model_dir(model_dir: Path, o: Overrides) -> Plan:
    arch = read_model_dir(model_dir)
    device = o.device or "gpu"
    hw = _hardware(o.hardware, device)
    notes: list[str] = []
    req = apply_overrides(EngineRequest(device=device, device_total_bytes=hw.total_bytes), o)
    req = with_cpu_features(req, hw, notes)
    if req.tensor_parallel_size < 1:
        raise UsageError("--tp must be at least 1")
    result = plan(PlanInput(arch=arch, request=req, hardware=hw))
    notes += [n for n in [version_note(req.vllm_version)] if n]
    result.assumptions[:0] = [f"model config: {model_dir / 'config.json'}", *arch.notes, *notes]
    return result


def arch_from_config(config: dict[str, Any], source: Path | str) -> ModelArch:
    """ModelArch of a parsed config.json; an error names the file (`source`) and the key."""
    try:
        return read_arch(config)
    except ModelConfigError as exc:
        raise located(exc, source) from None


def read_model_dir(model_dir: Path) -> ModelArch:
    path = model_dir / "config.json" if model_dir.is_dir() else model_dir
    return arch_from_config(read_config_json(path), path)
