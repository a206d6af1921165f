"""What a recipe serves and how: Model, Speculative, Engine, Runtime, Proxy, Monitoring, Guard.

Validators that look at several fields of one section call `deskside.recipe.rules`. Import
these models from `deskside.recipe.types`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from deskside.recipe.credentials import env_secret_problems, extra_arg_secret_problems
from deskside.recipe.data_parallel_rules import DEFAULT_RPC_PORT, engine_data_parallel_problems
from deskside.recipe.guard import Guard
from deskside.recipe.problems import raise_problems
from deskside.recipe.rules import (
    alias_problems,
    cpu_kvcache_space_problems,
    draft_model_problems,
    kv_cache_problems,
    managed_flag_problems,
    model_source_problems,
)
from deskside.recipe.text import BindHost, BindMount, ServedName, Text
from deskside.recipe.values import (
    MAX_BATCHED_TOKENS,
    MAX_LIST,
    MAX_NODES,
    MAX_NUM_SEQS,
    MAX_RANKS,
    MAX_SPECULATIVE_TOKENS,
    MODEL_CONFIG,
    AbsolutePath,
    BlockSize,
    EnvName,
    MaxModelLen,
    NoSpace,
    PinnedImage,
    Port,
    PositiveByteSize,
    PromDuration,
    Repo,
    Revision,
    ShmSize,
    SpeculativeMethod,
)

# Default images of the services deskside runs beside the engine under Docker Compose. The
# digests of Prometheus, Grafana and node_exporter are those of the tags' published
# multi-architecture manifests (amd64 and arm64: GB10 nodes are arm64).
PROMETHEUS_IMAGE = (
    "prom/prometheus:v2.55.1"
    "@sha256:2659f4c2ebb718e7695cb9b25ffa7d6be64db013daba13e05c875451cf51b0d3"
)
GRAFANA_IMAGE = (
    "grafana/grafana:11.6.0@sha256:62d2b9d20a19714ebfe48d1bb405086081bc602aa053e28cf6d73c7537640dfb"
)
NODE_EXPORTER_IMAGE = (
    "prom/node-exporter:v1.8.2"
    "@sha256:4032c6d5bfd752342c3e631c2f1de93ba6b86c41db6b167b9a35372c139e7706"
)
PLACEHOLDER_DIGEST = "sha256:" + "0" * 64
"""An all-zero digest: a placeholder to replace with the tag's real digest (`deskside
render` notes every image that still has one)."""

WeightsFormat = Literal["bf16", "fp16", "fp8", "nvfp4", "mxfp4", "fp8+mxfp4"]


class Model(BaseModel):
    """What is served, and under which names."""

    model_config = MODEL_CONFIG

    repo: Repo | None = Field(
        None,
        description="Hugging Face repository id 'org/name'. Exactly one of repo and path.",
    )
    revision: Revision | None = Field(
        None,
        description="The repository commit to serve: a 40-character lowercase hex hash "
        "(required with repo; branches and tags are refused because they move).",
    )
    path: NoSpace | None = Field(
        None,
        description="Local model folder (config.json, tokenizer, weights). Relative paths "
        "are relative to the recipe file. Exactly one of repo and path.",
    )
    config: NoSpace | None = Field(
        None,
        description="A config.json for offline planning (no download), relative to the "
        "recipe file.",
    )
    served_name: ServedName = Field(
        description="Model name clients send (OpenAI 'model' field), e.g. deepseek-v4-flash."
    )
    aliases: list[ServedName] = Field(
        default_factory=list,
        max_length=32,
        description="More names clients may use for the same model (vLLM --served-model-name "
        "takes them all; the proxy routes them).",
    )
    weights_format: WeightsFormat | None = Field(
        None,
        description="Weight quantisation: bf16, fp16, fp8, nvfp4, mxfp4 or fp8+mxfp4. None: "
        "read from the model config.",
    )

    @model_validator(mode="after")
    def _rules(self) -> Model:
        raise_problems(
            [
                *model_source_problems(repo=self.repo, revision=self.revision, path=self.path),
                *alias_problems(self.served_name, self.aliases),
            ]
        )
        return self

    @property
    def all_names(self) -> list[str]:
        """Every name the model answers to: served_name first, then the aliases."""
        return [self.served_name, *self.aliases]


class Speculative(BaseModel):
    """Speculative decoding (vLLM --speculative-config)."""

    model_config = MODEL_CONFIG

    method: SpeculativeMethod = Field(
        description="Proposer: mtp, dspark, eagle, eagle3, ngram, draft_model, ..."
    )
    num_speculative_tokens: int = Field(
        ge=1, le=MAX_SPECULATIVE_TOKENS, description="Draft tokens proposed per step."
    )
    draft_sample_method: NoSpace | None = Field(
        None, description="How draft tokens are sampled, e.g. 'probabilistic' (DSpark)."
    )
    model: NoSpace | None = Field(
        None, description="Draft model (repo or path) for eagle/eagle3/draft_model."
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        max_length=MAX_LIST,
        description="Further keys passed through to --speculative-config unchanged.",
    )

    @model_validator(mode="after")
    def _rules(self) -> Speculative:
        raise_problems(draft_model_problems(method=self.method, model=self.model))
        return self


class Engine(BaseModel):
    """The vLLM engine: version, container image and every serving setting."""

    model_config = MODEL_CONFIG

    vllm_version: NoSpace = Field(
        description='The vLLM version the engine runs (quote it: "0.32.0"). Planning '
        "follows this version's memory accounting."
    )
    image: NoSpace | None = Field(
        None,
        description="Container image with vLLM. With runtime.kind 'container' it must be "
        "pinned by digest: name:tag@sha256:<64 hex>.",
    )
    device: Literal["gpu", "cpu"] = Field(
        "gpu", description="What vLLM runs on; must match the nodes' hardware profiles."
    )
    tensor_parallel_size: int = Field(
        1, ge=1, le=MAX_RANKS, description="Tensor-parallel ranks (vLLM --tensor-parallel-size)."
    )
    pipeline_parallel_size: int = Field(
        1,
        ge=1,
        le=MAX_RANKS,
        description="Pipeline-parallel stages (vLLM --pipeline-parallel-size).",
    )
    nnodes: int = Field(
        1,
        ge=1,
        le=MAX_NODES,
        description="Number of nodes the engine spans; must equal the node count.",
    )
    data_parallel_size: int = Field(
        1,
        ge=1,
        le=MAX_RANKS,
        description="Data-parallel ranks (vLLM --data-parallel-size): engines that each "
        "have their own scheduler, KV cache and tensor x pipeline GPUs, behind one API "
        "server on the head. The cluster's GPUs must equal data x tensor x pipeline "
        "parallel size. 1: one engine.",
    )
    data_parallel_size_local: int | None = Field(
        None,
        ge=1,
        le=MAX_RANKS,
        description="Data-parallel ranks on each node (vLLM --data-parallel-size-local); "
        "only with data_parallel_size above 1. None: data_parallel_size / nodes, or 1 when "
        "one rank spans several nodes.",
    )
    data_parallel_rpc_port: Port = Field(
        DEFAULT_RPC_PORT,
        description="Port on the head where every node's engines meet the API server "
        "(vLLM --data-parallel-rpc-port); used when data_parallel_size is above 1.",
    )
    enable_expert_parallel: bool = Field(
        False,
        description="MoE models only (vLLM --enable-expert-parallel): each GPU holds whole "
        "experts, 1 / (tensor x data parallel size) of them, and tokens travel to their "
        "experts. False: every expert is split over those GPUs.",
    )
    host: BindHost | None = Field(
        None,
        description="Address the API server binds on the head (vLLM --host): an IPv4 "
        "address or a hostname, without scheme, path or port. None: the head's address. A "
        "wildcard (0.0.0.0, ::) binds every address; deskside then reaches the API at the "
        "head's address.",
    )
    port: Port = Field(8000, description="Port of the OpenAI-compatible API on the head node.")
    kv_cache_dtype: Literal[
        "auto", "bfloat16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla", "nvfp4_ds_mla"
    ] = Field("auto", description="KV cache element type (vLLM --kv-cache-dtype).")
    block_size: BlockSize | None = Field(
        None,
        description="Tokens per KV cache block (vLLM --block-size): 16, 32, 64, 128 or 256. "
        "None: the attention backend's default.",
    )
    max_model_len: MaxModelLen = Field(
        "auto",
        description="Longest context (prompt + output) in tokens, or 'auto': the longest "
        "that fits, as planned by deskside.",
    )
    max_num_batched_tokens: int | None = Field(
        None,
        ge=1,
        le=MAX_BATCHED_TOKENS,
        description="Token budget of one scheduler step (prefill chunk size).",
    )
    max_num_seqs: int | None = Field(
        None, ge=1, le=MAX_NUM_SEQS, description="Most sequences decoded concurrently."
    )
    gpu_memory_utilization: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Fraction of device memory vLLM may use (0-1]. On unified-memory hosts "
        "the rest is all the OS has. Not together with kv_cache_memory.",
    )
    kv_cache_memory: PositiveByteSize | None = Field(
        None,
        description="Exact KV cache size per rank (e.g. '1GiB'; vLLM --kv-cache-memory-bytes). "
        "Required on CPU. Not together with gpu_memory_utilization.",
    )
    speculative: Speculative | None = Field(None, description="Speculative decoding. None: off.")
    enable_prefix_caching: bool = Field(True, description="Reuse KV of repeated prompt prefixes.")
    enable_chunked_prefill: bool = Field(
        True, description="Prefill long prompts in chunks interleaved with decode."
    )
    async_scheduling: bool = Field(
        False, description="Overlap scheduling with execution (vLLM --async-scheduling)."
    )
    enforce_eager: bool = Field(False, description="Disable CUDA graphs (vLLM --enforce-eager).")
    load_format: NoSpace = Field(
        "auto", description="How weights are loaded (vLLM --load-format); 'dummy' = random."
    )
    dtype: NoSpace = Field("auto", description="Activation/weight dtype (vLLM --dtype).")
    distributed_executor_backend: Literal["mp", "ray"] = Field(
        "mp", description="Multi-process ('mp', no Ray) or Ray executor."
    )
    extra_args: list[Text] = Field(
        default_factory=list,
        max_length=MAX_LIST,
        description="More `vllm serve` arguments, passed as given (e.g. --tool-call-parser "
        "deepseek_v4). Flags deskside derives from other fields, and credentials (--api-key, "
        "tokens), are refused here.",
    )
    env: dict[EnvName, Text] = Field(
        default_factory=dict,
        max_length=MAX_LIST,
        description="Environment variables for every engine process. Values are strings: "
        'quote numbers ("0").',
    )

    @model_validator(mode="after")
    def _rules(self) -> Engine:
        raise_problems(
            [
                *kv_cache_problems(
                    device=self.device,
                    gpu_memory_utilization=self.gpu_memory_utilization,
                    kv_cache_memory=self.kv_cache_memory,
                ),
                *managed_flag_problems(self.extra_args),
                *extra_arg_secret_problems(self.extra_args),
                *env_secret_problems(self.env, ("env",)),
                *cpu_kvcache_space_problems(self.env),
                *engine_data_parallel_problems(self),
            ]
        )
        return self


class Runtime(BaseModel):
    """How the engine runs on each node."""

    model_config = MODEL_CONFIG

    kind: Literal["container", "native"] = Field(
        "container",
        description="'container': the engine image under Docker (host network); 'native': "
        "a Python environment with vLLM installed on the node.",
    )
    root: AbsolutePath = Field(
        "/opt/deskside", description="Folder on every node for deskside's files."
    )
    hf_cache: AbsolutePath = Field(
        "/var/lib/deskside/hf-cache",
        description="Hugging Face cache on every node (weights, and vLLM/FlashInfer caches).",
    )
    shm_size: ShmSize = Field(
        "64g", description="Shared memory for the container (Docker --shm-size)."
    )
    python: NoSpace | None = Field(
        None, description="native: the Python interpreter that has vLLM. None: 'python3'."
    )
    systemd: bool = Field(
        True, description="Install systemd units so the service comes back after a reboot."
    )
    compose: Literal["docker compose", "docker-compose"] = Field(
        "docker compose",
        description="container: the Compose program on the nodes, the Docker CLI plugin "
        "(Compose v2) or the standalone 'docker-compose' (v1.29, as Debian ships it). The "
        "rendered files are in the part of the Compose format both accept.",
    )
    memory_max: PositiveByteSize | None = Field(
        None,
        description="Memory limit of the engine on each node (systemd MemoryMax=, Compose "
        "mem_limit): past it the kernel stops the engine, which restarts, instead of the "
        "node running out of memory. None: the hardware's memory less its safety floor "
        "when the hardware profile knows its memory (GB10: 100.6 GiB); no limit on CPU "
        "profiles.",
    )
    volumes: list[BindMount] = Field(
        default_factory=list,
        max_length=MAX_LIST,
        description="container: more folders of the node mounted into the engine container, "
        "'SOURCE:TARGET' or 'SOURCE:TARGET:ro' (e.g. a patched vLLM checkout).",
    )


class Proxy(BaseModel):
    """An OpenAI-compatible proxy in front of the engine."""

    model_config = MODEL_CONFIG

    enabled: bool = Field(False, description="Run the proxy on the head node.")
    kind: Literal["litellm"] = Field("litellm", description="Proxy implementation.")
    port: Port = Field(4000, description="Port the proxy listens on.")
    litellm: NoSpace = Field(
        "litellm",
        pattern=r"^[^-]",
        description="The LiteLLM program on the head: a name on its PATH or an absolute path "
        "(LiteLLM's dependencies clash with vLLM's, so it often lives in its own virtualenv: "
        "/opt/litellm/bin/litellm).",
    )
    master_key_file: NoSpace | None = Field(
        None,
        description="File on the head node holding the proxy's master key. None: no key.",
    )
    image: PinnedImage | None = Field(
        None,
        description="A LiteLLM image (pinned by digest, e.g. ghcr.io/berriai/litellm:v1.108.5"
        "@sha256:...) for the container runtime to run the proxy from under Docker Compose. "
        "None: the proxy runs natively on the head under every runtime, from proxy.litellm "
        "(`deskside proxy install --venv /opt/litellm` installs the tested version).",
    )


class MonitoringImages(BaseModel):
    """The images of the monitoring services under Docker Compose, pinned by digest."""

    model_config = MODEL_CONFIG

    prometheus: PinnedImage = Field(PROMETHEUS_IMAGE, description="Prometheus (head).")
    grafana: PinnedImage = Field(GRAFANA_IMAGE, description="Grafana (head).")
    node_exporter: PinnedImage = Field(NODE_EXPORTER_IMAGE, description="node_exporter (nodes).")


class Monitoring(BaseModel):
    """Prometheus, Grafana and node_exporter."""

    model_config = MODEL_CONFIG

    enabled: bool = Field(
        False, description="Deploy Prometheus and Grafana (head) and node_exporter (every node)."
    )
    prometheus_port: Port = Field(9090, description="Prometheus port on the head node.")
    grafana_port: Port = Field(3000, description="Grafana port on the head node.")
    node_exporter_port: Port = Field(9100, description="node_exporter port on every node.")
    scrape_interval: PromDuration = Field(
        "15s", description="Prometheus scrape interval (a Prometheus duration: 15s, 1m)."
    )
    images: MonitoringImages = Field(
        default_factory=MonitoringImages,
        description="Images of Prometheus, Grafana and node_exporter under Docker Compose.",
    )
    prometheus: NoSpace = Field(
        "prometheus",
        pattern=r"^[^-]",
        description="native runtime: the Prometheus program on the head (a name on the PATH "
        "or an absolute path).",
    )
    node_exporter: NoSpace = Field(
        "prometheus-node-exporter",
        pattern=r"^[^-]",
        description="native runtime: the node_exporter program on every node (Debian and "
        "Ubuntu name it prometheus-node-exporter; upstream's release is node_exporter).",
    )
    deskside: NoSpace = Field(
        "deskside",
        pattern=r"^[^-]",
        description="The deskside program on every node, which runs deskside's exporter (a "
        "name on the PATH or an absolute path).",
    )


__all__ = [
    "Engine",
    "Guard",
    "Model",
    "Monitoring",
    "MonitoringImages",
    "Proxy",
    "Runtime",
    "Speculative",
    "WeightsFormat",
]
