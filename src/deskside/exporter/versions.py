"""What the node runs, as the labels of `deskside_versions_info`: deskside, vLLM (the
engine's: the recipe's engine.vllm_version, replaced by a version the engine's /metrics
states when it states one), the NVIDIA driver and its CUDA version (NVML), NCCL (the
`nvidia-nccl-cu*` distribution beside the exporter) and the engine image's digest when the
recipe pins one (`image@sha256:...`). Anything unknown is `series.UNKNOWN`."""

from __future__ import annotations

from importlib import metadata

from deskside.exporter import series
from deskside.exporter.gpu import Nvml
from deskside.recipe.types import Recipe
from deskside.render.lock import deskside_version, image_digest

LABELS = ("deskside", "vllm", "driver", "cuda", "nccl", "image_digest")
NCCL_DISTRIBUTIONS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")


def nccl_version() -> str | None:
    """The version of an installed NCCL wheel (`nvidia-nccl-cu13`, -cu12 or -cu11), looked
    up by name: scanning every installed distribution costs a third of a second."""
    for name in NCCL_DISTRIBUTIONS:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def pinned_digest(image: str | None) -> str | None:
    digest = image_digest(image)
    return digest if digest and digest.startswith("sha256:") else None


def static_versions(recipe: Recipe, nvml: Nvml | None) -> dict[str, str]:
    """The labels that do not change while the exporter runs."""
    found = {
        "deskside": deskside_version(),
        "vllm": recipe.engine.vllm_version,
        "driver": nvml.driver_version() if nvml else None,
        "cuda": nvml.cuda_version() if nvml else None,
        "nccl": nccl_version(),
        "image_digest": pinned_digest(recipe.engine.image),
    }
    return {k: str(v) if v else series.UNKNOWN for k, v in found.items()}


def with_engine(versions: dict[str, str], engine_vllm: str | None) -> dict[str, str]:
    return {**versions, "vllm": engine_vllm} if engine_vllm else versions
