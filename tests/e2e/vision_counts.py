"""Counts the parameters of vision towers as vLLM 0.32 builds them, on the meta device (no
memory, no weights): run as a script, it reads a JSON list of cases on stdin, each
{"tower": ..., "vision": <vision_config or null>, "text_hidden": <text hidden size>,
"outer": <the wrapper's own keys>}, and prints the list of counts. A separate process
because it changes its interpreter for vLLM: it hides the CPU-incompatible torchvision as
deskside's engine launcher does, and stands in for the image-processing modules vLLM's
model files import at the top (they need torchvision; building the towers never calls
them)."""

from __future__ import annotations

import inspect
import json
import sys
import tempfile
import types
from typing import Any

from deskside.engine import cpu

PROCESSING_MODULES = (
    "transformers.models.llama4.image_processing_llama4",
    "transformers.models.qwen2_vl.image_processing_qwen2_vl",
    "transformers.models.qwen3_vl.video_processing_qwen3_vl",
    "transformers.models.pixtral.image_processing_pixtral",
)


class _Unused(types.ModuleType):
    """A module whose every name is a placeholder class: only imported, never used."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


def main() -> None:
    cpu.install()
    for name in PROCESSING_MODULES:
        sys.modules[name] = _Unused(name)
    cases = json.load(sys.stdin)

    import torch
    from transformers import Llama4Config, Mistral3Config, Qwen3VLConfig, Qwen3VLMoeConfig
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5Config
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeConfig
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.model_executor.models import mistral3, mllama4, qwen3_5, qwen3_vl, qwen3_vl_moe
    from vllm.model_executor.models.mistral3 import (
        Mistral3MultiModalProjector,
        init_vision_tower_for_mistral3,
    )
    from vllm.model_executor.models.mllama4 import Llama4MultiModalProjector, Llama4VisionModel
    from vllm.model_executor.models.qwen3_vl import Qwen3_VisionTransformer

    # the wrappers build these classes (checked so a vLLM that changes them fails here)
    wrappers = {
        mllama4.Llama4ForConditionalGeneration: (
            "Llama4VisionModel(",
            "Llama4MultiModalProjector(",
        ),
        qwen3_vl.Qwen3VLForConditionalGeneration: ("Qwen3_VisionTransformer(",),
        qwen3_vl_moe.Qwen3VLMoeForConditionalGeneration: ("Qwen3_VisionTransformer(",),
        qwen3_5.Qwen3_5ForConditionalGeneration: ("Qwen3_VisionTransformer(",),
        qwen3_5.Qwen3_5MoeForConditionalGeneration: ("Qwen3_VisionTransformer(",),
        mistral3.Mistral3ForConditionalGeneration: (
            "init_vision_tower_for_mistral3(",
            "Mistral3MultiModalProjector(",
        ),
    }
    for cls, built in wrappers.items():
        source = inspect.getsource(cls.__init__)
        missing = [b for b in built if b not in source]
        if missing:
            raise SystemExit(f"{cls.__name__}.__init__ no longer builds {missing}")

    qwen_configs = {
        "qwen3_vl": Qwen3VLConfig,
        "qwen3_vl_moe": Qwen3VLMoeConfig,
        "qwen3_5": Qwen3_5Config,
        "qwen3_5_moe": Qwen3_5MoeConfig,
    }
    counts = []
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            distributed_init_method=f"file://{tempfile.mkdtemp()}/init",
            backend="gloo",
        )
        initialize_model_parallel(1, 1)
        for case in cases:
            tower, vision, text_hidden = case["tower"], case["vision"], case["text_hidden"]
            outer = case.get("outer", {})
            with torch.device("meta"):
                if tower == "llama4":
                    # Llama4ForConditionalGeneration.__init__: the tower and the projector
                    config = Llama4Config(
                        vision_config=vision, text_config={"hidden_size": text_hidden}, **outer
                    )
                    modules = [
                        Llama4VisionModel(config.vision_config),
                        Llama4MultiModalProjector(config),
                    ]
                elif tower == "mistral3":
                    # Mistral3ForConditionalGeneration.__init__: the tower and the projector
                    text = {"model_type": "mistral", "hidden_size": text_hidden}
                    config = Mistral3Config(vision_config=vision, text_config=text, **outer)
                    modules = [
                        init_vision_tower_for_mistral3(config, None, require_post_norm=False),
                        Mistral3MultiModalProjector(
                            vision_hidden_size=config.vision_config.hidden_size,
                            text_hidden_size=config.text_config.hidden_size,
                            projector_hidden_act=config.projector_hidden_act,
                            spatial_merge_size=config.spatial_merge_size,
                            patch_size=config.vision_config.patch_size,
                            multimodal_projector_bias=config.multimodal_projector_bias,
                        ),
                    ]
                else:
                    # Qwen3VLForConditionalGeneration.__init__ (and the MoE and Qwen3.5 ones)
                    config = qwen_configs[tower](vision_config=vision, **outer)
                    modules = [Qwen3_VisionTransformer(config.vision_config, norm_eps=1e-6)]
            counts.append(sum(p.numel() for m in modules for p in m.parameters()))
    json.dump(counts, sys.stdout)


if __name__ == "__main__":
    main()
