"""What a model family supplies to the planner. The registry
(deskside.planner.registry) finds a config's family once; the planner then asks it
everything that differs between families."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from deskside.planner.kv import Accounting, KVSpec
from deskside.planner.types import (
    EngineDefaults,
    EngineSettings,
    ModelArch,
    NonKVEstimate,
)


class Family(Protocol):
    """A model family: its config reader, its caches, its KV accounting, its non-KV memory."""

    @property
    def name(self) -> str:
        """The family's name in the registry."""
        ...

    @property
    def model_types(self) -> Mapping[str, str]:
        """config.json model_type -> the ModelArch.family it reads as."""
        ...

    def read(self, cfg: Mapping[str, Any]) -> ModelArch:
        """ModelArch from a parsed config.json (its text config). Raises ModelConfigError."""
        ...

    def engine_defaults(self, arch: ModelArch) -> EngineDefaults:
        """What vLLM decides for this model by itself (block sizes, CPU chunked prefill)."""
        ...

    def layer_specs(self, arch: ModelArch, settings: EngineSettings) -> dict[str, KVSpec]:
        """The KV cache spec of every cached layer of one rank, in registration order."""
        ...

    def accounting(self, specs: dict[str, KVSpec], settings: EngineSettings) -> Accounting:
        """How the engine groups these caches and charges KV memory."""
        ...

    def draft_layers_loaded(self, arch: ModelArch, settings: EngineSettings) -> int:
        """Draft layers whose weights the speculative method loads."""
        ...

    def non_kv(
        self, arch: ModelArch, settings: EngineSettings, max_model_len: int
    ) -> NonKVEstimate:
        """Non-KV memory of one GPU rank (activations, workspaces, buffers)."""
        ...
