"""The recipe: pydantic models for what a user writes in `recipes/*.yaml`.

Every model forbids unknown keys and is frozen. Field descriptions are the documentation
editors show (they become the JSON Schema, see `deskside.recipe.schema`). Validation is
strict about types: YAML already types its scalars, so `port: "8000"` is refused rather
than quietly converted, and `VLLM_USE_BREAKABLE_CUDAGRAPH: 0` must be quoted.

Rules that involve several fields are collected as `Problem`s, each pointing at the field
to fix (a path relative to the model that found it), and raised together as one
`RecipeProblems` (a ValueError, so pydantic reports it). `deskside.recipe.load` turns them
into located `RecipeError`s; Python callers see an ordinary pydantic ValidationError.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    model_validator,
)

from deskside.hardware import PROFILES
from deskside.units import parse_bytes

LocPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a recipe.

    `loc` is the path of the field to fix, relative to the model that raised it. When that
    field is absent from the user's file (it took its default), the loader points at the
    first of `fallback_locs` that is present, else at the nearest enclosing key.
    """

    loc: LocPath
    message: str
    hint: str | None = None
    fallback_locs: tuple[LocPath, ...] = ()


class RecipeProblems(ValueError):
    """Raised by validators: carries the located problems for the loader to report."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__(
            "; ".join(
                (".".join(str(part) for part in p.loc) + ": " if p.loc else "") + p.message
                for p in self.problems
            )
        )


def _fail(message: str, hint: str | None = None) -> RecipeProblems:
    return RecipeProblems([Problem((), message, hint)])


def did_you_mean(word: str, choices: Sequence[str]) -> str | None:
    """The closest of `choices` to `word` (difflib), or None when nothing is close."""
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if not matches:
        lowered = {c.lower(): c for c in choices}
        if word.lower() in lowered:
            return lowered[word.lower()]
        return None
    return matches[0]


# --------------------------------------------------------------------------- value types


def _matching(
    pattern: str, what: str, example: str, extra: Callable[[str], str | None] | None = None
) -> Callable[[str], str]:
    """An after-validator refusing strings that do not match `pattern`."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if compiled.fullmatch(value) is None:
            raise _fail(f"{value!r} is not {what}", f"write {what}, e.g. {example}")
        if extra is not None:
            problem = extra(value)
            if problem is not None:
                raise _fail(problem, f"write {what}, e.g. {example}")
        return value

    return check


Slug = Annotated[
    str,
    AfterValidator(
        _matching(
            r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?",
            "a slug (lowercase letters, digits and '-', at most 63 characters, not starting "
            "or ending with '-')",
            "'dual-spark-deepseek-v4-flash'",
        )
    ),
]

NodeName = Annotated[
    str,
    AfterValidator(
        _matching(
            r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}",
            "a node name (letters, digits, '.', '_' or '-', at most 63 characters)",
            "'ai1'",
        )
    ),
]

NetnsName = Annotated[
    str,
    AfterValidator(
        _matching(
            r"[a-z0-9][a-z0-9_-]{0,11}",
            "a network namespace name (lowercase letters, digits, '_' or '-', at most 12 "
            "characters, so derived interface names fit Linux's 15)",
            "'ds-node0'",
        )
    ),
]

_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME_RE = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*\.?")
_DOTTED_RE = re.compile(r"[0-9.]+")


def _check_host(value: str) -> str:
    """An IPv4 address or a DNS hostname."""
    if _DOTTED_RE.fullmatch(value):
        try:
            ipaddress.IPv4Address(value)
        except ValueError:
            raise _fail(
                f"{value!r} is not a valid IPv4 address",
                "write four numbers 0-255 separated by dots, e.g. 192.168.0.27",
            ) from None
        return value
    if ":" in value:
        raise _fail(
            f"{value!r} looks like an IPv6 address; deskside uses IPv4 addresses or hostnames",
            "write the node's IPv4 address (e.g. 192.168.0.27) or its hostname",
        )
    if len(value) > 253 or _HOSTNAME_RE.fullmatch(value) is None:
        raise _fail(
            f"{value!r} is neither an IPv4 address nor a hostname",
            "write the node's IPv4 address (e.g. 192.168.0.27) or its hostname (e.g. ai1.lan)",
        )
    return value


HostAddress = Annotated[str, AfterValidator(_check_host)]

InterfaceName = Annotated[
    str,
    AfterValidator(
        _matching(
            r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}",
            "a network interface name (at most 15 characters: letters, digits, '_', '.', '-')",
            "'enp1s0f0np0'",
        )
    ),
]

HcaName = Annotated[
    str,
    AfterValidator(
        _matching(
            r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(?::[0-9]{1,3})?",
            "an RDMA device name (as listed in /sys/class/infiniband), optionally with ':port'",
            "'rocep1s0f0'",
        )
    ),
]

_ENV_NAME = "an environment variable name (letters, digits and '_', not starting with a digit)"
EnvName = Annotated[
    str, AfterValidator(_matching(r"[A-Za-z_][A-Za-z0-9_]*", _ENV_NAME, "'NCCL_DEBUG'"))
]

NoSpace = Annotated[
    str,
    AfterValidator(
        _matching(r"\S{1,256}", "a non-empty word without spaces", "'deepseek-v4-flash'")
    ),
]

AbsolutePath = Annotated[
    str,
    AfterValidator(
        _matching(r"/\S*", "an absolute path on the nodes (starting with '/')", "'/opt/deskside'")
    ),
]

Port = Annotated[int, Field(ge=1, le=65535)]

_BYTES_PATTERN = r"^\s*([0-9]+(\.[0-9]*)?|\.[0-9]+)\s*([KkMmGgTtPp][Ii]?[Bb]?|[Bb])?\s*$"


def _to_bytes(value: object) -> object:
    """Before-validator for byte sizes: ints pass, strings like '1GiB' are parsed."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise _fail(
            "expected a byte size",
            "write a whole number of bytes or a size with a unit, e.g. '1GiB' or '512 MiB'",
        )
    try:
        return parse_bytes(value)
    except ValueError as exc:
        raise _fail(
            str(exc),
            "write a whole number of bytes or a size with a unit, e.g. '1GiB' or '512 MiB'",
        ) from None


def _byte_size_schema(minimum: int) -> dict[str, Any]:
    return {
        "anyOf": [
            {"type": "integer", "minimum": minimum},
            {"type": "string", "pattern": _BYTES_PATTERN},
        ]
    }


ByteSize = Annotated[
    int, BeforeValidator(_to_bytes), Field(ge=0), WithJsonSchema(_byte_size_schema(0))
]
PositiveByteSize = Annotated[
    int, BeforeValidator(_to_bytes), Field(ge=1), WithJsonSchema(_byte_size_schema(1))
]


def _to_max_model_len(value: object) -> object:
    if value == "auto" and isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise _fail(
                f"must be at least 1 token, got {value}",
                "write a context length in tokens (e.g. 204800) or 'auto'",
            )
        return value
    raise _fail(
        "expected a whole number of tokens or 'auto'",
        "write a context length in tokens (e.g. 204800), or 'auto' to let deskside plan it",
    )


MaxModelLen = Annotated[
    int | Literal["auto"],
    BeforeValidator(_to_max_model_len),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1}, {"const": "auto"}]}),
]


def _check_hardware(value: str) -> str:
    if value in PROFILES:
        return value
    known = ", ".join(PROFILES)
    guess = did_you_mean(value, list(PROFILES))
    hint = f"did you mean {guess!r}? " if guess else ""
    raise _fail(
        f"unknown hardware profile {value!r} (known: {known})",
        f"{hint}hardware profiles are defined in deskside/hardware.py",
    )


HardwareName = Annotated[str, AfterValidator(_check_hardware)]


def _check_repo(value: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}", value):
        return value
    raise _fail(
        f"{value!r} is not a Hugging Face repository id",
        "write it as 'organisation/name', e.g. 'deepseek-ai/DeepSeek-V4-Flash-0731'",
    )


_REVISION_HINT = (
    "pin the exact commit: copy the 40-character hash from the repository's 'Files and "
    "versions' → 'History' page, or run `git ls-remote https://huggingface.co/ORG/NAME "
    "refs/heads/main`"
)


def _check_revision(value: str) -> str:
    if re.fullmatch(r"[0-9a-f]{40}", value):
        return value
    if re.fullmatch(r"[0-9A-Fa-f]{40}", value):
        raise _fail(f"revision {value!r} must be written in lowercase", _REVISION_HINT)
    raise _fail(
        f"revision {value!r} is not a commit hash: a revision must be a 40-character "
        "lowercase hex commit, not a branch or tag name (branches move, so the weights "
        "could change under you)",
        _REVISION_HINT,
    )


_PROM_DURATION = re.compile(r"(?:[0-9]+(?:ms|s|m|h|d|w|y))+")


def _check_duration(value: str) -> str:
    if _PROM_DURATION.fullmatch(value) and re.search(r"[1-9]", value):
        return value
    raise _fail(
        f"{value!r} is not a Prometheus duration",
        "write a number with a unit: ms, s, m, h, d, w or y, e.g. '15s' or '1m30s'",
    )


def _check_shm(value: str) -> str:
    if re.fullmatch(r"[0-9]+(?:\.[0-9]+)? ?[kKmMgGtTpP]?[iI]?[bB]?", value) and re.search(
        r"[1-9]", value
    ):
        return value
    raise _fail(
        f"{value!r} is not a shared-memory size",
        "write a size as Docker takes it, e.g. '64g' or '16384m'",
    )


# --------------------------------------------------------------------------- models

_CONFIG = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Ssh(BaseModel):
    """How deskside reaches a node over SSH."""

    model_config = _CONFIG

    user: Annotated[
        str,
        AfterValidator(
            _matching(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}", "a user name", "'root' or 'ubuntu'")
        ),
    ] = Field("root", description="Login user on the node.")
    port: Port = Field(22, description="SSH port on the node.")
    identity_file: NoSpace | None = Field(
        None,
        description="Private key file on the machine running deskside (e.g. "
        "~/.ssh/id_ed25519). None: the SSH agent and ~/.ssh/config decide.",
    )


class NodeFabric(BaseModel):
    """The node's side of the fast GPU-to-GPU fabric (RoCE or a dedicated link)."""

    model_config = _CONFIG

    interface: InterfaceName = Field(
        description="Network interface (netdev) carrying the fabric, as `ip link` names it, "
        "e.g. enp1s0f0np0. Becomes NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME."
    )
    address: IPv4Address = Field(
        strict=False,
        description="This node's IPv4 address on the fabric interface. RoCEv2 GID "
        "resolution picks the GID entry carrying it.",
    )
    hcas: list[HcaName] = Field(
        default_factory=list,
        description="RDMA devices (from /sys/class/infiniband) NCCL may use, e.g. "
        "[rocep1s0f0, rocep1s0f1]. Becomes NCCL_IB_HCA. Required for transport 'roce'.",
    )

    @model_validator(mode="after")
    def _unique_hcas(self) -> NodeFabric:
        seen: set[str] = set()
        problems = []
        for index, hca in enumerate(self.hcas):
            if hca in seen:
                problems.append(
                    Problem(("hcas", index), f"RDMA device {hca!r} is listed twice", "list it once")
                )
            seen.add(hca)
        if problems:
            raise RecipeProblems(problems)
        return self


class Node(BaseModel):
    """One machine of the cluster."""

    model_config = _CONFIG

    name: NodeName = Field(description="Short name of the node (e.g. ai1), used in logs and files.")
    address: HostAddress = Field(
        description="Management/API address of the node: an IPv4 address or a hostname. "
        "deskside connects here (SSH) and the head serves the API here."
    )
    role: Literal["head", "worker"] = Field(
        description="'head' runs the API server and rank 0 (exactly one node); 'worker' runs "
        "headless engine ranks."
    )
    hardware: HardwareName = Field(
        description="Hardware profile name (deskside/hardware.py): " + ", ".join(PROFILES) + "."
    )
    gpus: int = Field(1, ge=1, description="Engine ranks (GPUs) on this node.")
    ssh: Ssh | None = Field(
        None, description="How to reach the node over SSH. None: the node is this machine."
    )
    netns: NetnsName | None = Field(
        None,
        description="Run this node in a network namespace of this machine (created by "
        "deskside with the node's fabric address on a veth joined to a local bridge), so a "
        "multi-node cluster can run on one host with real interfaces between the nodes.",
    )
    fabric: NodeFabric | None = Field(
        None,
        description="The node's fabric interface and address for NCCL/Gloo. None: the "
        "management address is used.",
    )


class Fabric(BaseModel):
    """How the engine ranks talk to each other across nodes."""

    model_config = _CONFIG

    transport: Literal["roce", "socket", "loopback"] = Field(
        "socket",
        description="'roce': NCCL over RDMA (NCCL_NET=IB, RoCEv2); 'socket': NCCL over TCP; "
        "'loopback': every rank on one host.",
    )
    mtu: int | None = Field(
        None,
        ge=576,
        le=9216,
        description="Expected MTU of the fabric interfaces (e.g. 9000 for jumbo frames); "
        "checked by the fabric probes. None: not checked.",
    )
    master_port: Port = Field(
        25000, description="TCP port of the torch.distributed rendezvous on the head node."
    )
    nccl_env: dict[EnvName, str] = Field(
        default_factory=dict,
        description="Extra NCCL_*/GLOO_* environment variables, added after the ones deskside "
        "derives from the transport. Values are strings (quote numbers).",
    )


class Cluster(BaseModel):
    """The machines and the fabric between them."""

    model_config = _CONFIG

    nodes: list[Node] = Field(
        min_length=1, description="The nodes, head first by convention; exactly one head."
    )
    fabric: Fabric = Field(
        default_factory=Fabric, description="The fabric connecting the engine ranks."
    )


WeightsFormat = Literal["bf16", "fp16", "fp8", "nvfp4", "mxfp4", "fp8+mxfp4"]


class Model(BaseModel):
    """What is served, and under which names."""

    model_config = _CONFIG

    repo: Annotated[str, AfterValidator(_check_repo)] | None = Field(
        None,
        description="Hugging Face repository id 'org/name'. Exactly one of repo and path.",
    )
    revision: Annotated[str, AfterValidator(_check_revision)] | None = Field(
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
    served_name: NoSpace = Field(
        description="Model name clients send (OpenAI 'model' field), e.g. deepseek-v4-flash."
    )
    aliases: list[NoSpace] = Field(
        default_factory=list,
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
        problems: list[Problem] = []
        if self.repo is not None and self.path is not None:
            problems.append(
                Problem(
                    ("path",),
                    "give either repo or path, not both",
                    "keep repo (+ revision) to download from Hugging Face, or path for a "
                    "local folder",
                )
            )
        elif self.repo is None and self.path is None:
            problems.append(
                Problem(
                    (),
                    "no model given: set repo (with revision) or path",
                    "e.g. repo: deepseek-ai/DeepSeek-V4-Flash-0731 and revision: <commit>, "
                    "or path: ./models/my-model",
                )
            )
        if self.repo is not None and self.revision is None:
            problems.append(
                Problem(("repo",), "repo needs a pinned revision (a commit hash)", _REVISION_HINT)
            )
        if self.repo is None and self.revision is not None:
            problems.append(
                Problem(
                    ("revision",),
                    "revision only applies to a Hugging Face repo",
                    "remove revision, or give repo instead of path",
                )
            )
        seen: set[str] = set()
        for index, alias in enumerate(self.aliases):
            if alias == self.served_name:
                problems.append(
                    Problem(
                        ("aliases", index),
                        f"alias {alias!r} is the served_name already",
                        "remove it from aliases",
                    )
                )
            elif alias in seen:
                problems.append(
                    Problem(("aliases", index), f"alias {alias!r} is listed twice", "list it once")
                )
            seen.add(alias)
        if problems:
            raise RecipeProblems(problems)
        return self

    @property
    def all_names(self) -> list[str]:
        """Every name the model answers to: served_name first, then the aliases."""
        return [self.served_name, *self.aliases]


_NEEDS_DRAFT_MODEL = {"draft_model", "eagle", "eagle3"}


class Speculative(BaseModel):
    """Speculative decoding (vLLM --speculative-config)."""

    model_config = _CONFIG

    method: Annotated[
        str,
        AfterValidator(
            _matching(r"[A-Za-z0-9_]{1,64}", "a speculative method name", "'mtp' or 'dspark'")
        ),
    ] = Field(description="Proposer: mtp, dspark, eagle, eagle3, ngram, draft_model, ...")
    num_speculative_tokens: int = Field(ge=1, description="Draft tokens proposed per step.")
    draft_sample_method: NoSpace | None = Field(
        None, description="How draft tokens are sampled, e.g. 'probabilistic' (DSpark)."
    )
    model: NoSpace | None = Field(
        None, description="Draft model (repo or path) for eagle/eagle3/draft_model."
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Further keys passed through to --speculative-config unchanged.",
    )

    @model_validator(mode="after")
    def _rules(self) -> Speculative:
        if self.method in _NEEDS_DRAFT_MODEL and self.model is None:
            raise RecipeProblems(
                [
                    Problem(
                        ("method",),
                        f"method {self.method!r} needs a draft model",
                        "set speculative.model to the draft model's repo or path",
                    )
                ]
            )
        return self


# vLLM flags deskside derives from recipe fields: setting them in extra_args would make the
# engine disagree with the plan. Maps the flag to the recipe field that controls it.
_MANAGED_FLAGS = {
    "--tensor-parallel-size": "engine.tensor_parallel_size",
    "-tp": "engine.tensor_parallel_size",
    "--pipeline-parallel-size": "engine.pipeline_parallel_size",
    "-pp": "engine.pipeline_parallel_size",
    "--nnodes": "engine.nnodes",
    "--node-rank": "the node's place in cluster.nodes (deskside sets it per node)",
    "--master-addr": "the head node's address",
    "--master-port": "cluster.fabric.master_port",
    "--headless": "the node's role (deskside sets it per node)",
    "--host": "engine.host",
    "--port": "engine.port",
    "--served-model-name": "model.served_name and model.aliases",
    "--revision": "model.revision",
    "--max-model-len": "engine.max_model_len",
    "--max-num-seqs": "engine.max_num_seqs",
    "--max-num-batched-tokens": "engine.max_num_batched_tokens",
    "--gpu-memory-utilization": "engine.gpu_memory_utilization",
    "--kv-cache-memory-bytes": "engine.kv_cache_memory",
    "--kv-cache-memory": "engine.kv_cache_memory",
    "--kv-cache-dtype": "engine.kv_cache_dtype",
    "--block-size": "engine.block_size",
    "--speculative-config": "engine.speculative",
    "--enable-prefix-caching": "engine.enable_prefix_caching",
    "--no-enable-prefix-caching": "engine.enable_prefix_caching",
    "--enable-chunked-prefill": "engine.enable_chunked_prefill",
    "--no-enable-chunked-prefill": "engine.enable_chunked_prefill",
    "--async-scheduling": "engine.async_scheduling",
    "--no-async-scheduling": "engine.async_scheduling",
    "--enforce-eager": "engine.enforce_eager",
    "--load-format": "engine.load_format",
    "--dtype": "engine.dtype",
    "--distributed-executor-backend": "engine.distributed_executor_backend",
}


def _flag_name(arg: str) -> str:
    flag = arg.split("=", 1)[0]
    if flag.startswith("--"):
        return "--" + flag[2:].replace("_", "-")
    return flag


class Engine(BaseModel):
    """The vLLM engine: version, container image and every serving setting."""

    model_config = _CONFIG

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
        1, ge=1, description="Tensor-parallel ranks (vLLM --tensor-parallel-size)."
    )
    pipeline_parallel_size: int = Field(
        1, ge=1, description="Pipeline-parallel stages (vLLM --pipeline-parallel-size)."
    )
    nnodes: int = Field(
        1, ge=1, description="Number of nodes the engine spans; must equal the node count."
    )
    host: NoSpace | None = Field(
        None,
        description="Address the API server binds on the head (vLLM --host). None: all addresses.",
    )
    port: Port = Field(8000, description="Port of the OpenAI-compatible API on the head node.")
    kv_cache_dtype: Literal[
        "auto", "bfloat16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla", "nvfp4_ds_mla"
    ] = Field("auto", description="KV cache element type (vLLM --kv-cache-dtype).")
    block_size: int | None = Field(
        None,
        ge=1,
        description="Tokens per KV cache block (vLLM --block-size). None: the attention "
        "backend's default.",
    )
    max_model_len: MaxModelLen = Field(
        "auto",
        description="Longest context (prompt + output) in tokens, or 'auto': the longest "
        "that fits, as planned by deskside.",
    )
    max_num_batched_tokens: int | None = Field(
        None, ge=1, description="Token budget of one scheduler step (prefill chunk size)."
    )
    max_num_seqs: int | None = Field(None, ge=1, description="Most sequences decoded concurrently.")
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
    extra_args: list[str] = Field(
        default_factory=list,
        description="More `vllm serve` arguments, passed as given (e.g. --tool-call-parser "
        "deepseek_v4). Flags deskside derives from other fields are refused here.",
    )
    env: dict[EnvName, str] = Field(
        default_factory=dict,
        description="Environment variables for every engine process. Values are strings: "
        'quote numbers ("0").',
    )

    @model_validator(mode="after")
    def _rules(self) -> Engine:
        problems: list[Problem] = []
        if self.gpu_memory_utilization is not None and self.kv_cache_memory is not None:
            problems.append(
                Problem(
                    ("kv_cache_memory",),
                    "set gpu_memory_utilization or kv_cache_memory, not both",
                    "kv_cache_memory fixes the KV cache size exactly; gpu_memory_utilization "
                    "lets vLLM size it from a memory fraction. Remove one.",
                )
            )
        if self.device == "cpu" and self.kv_cache_memory is None:
            problems.append(
                Problem(
                    ("device",),
                    "device 'cpu' needs kv_cache_memory (vLLM on CPU does not size its KV "
                    "cache from a memory fraction)",
                    "add e.g. kv_cache_memory: 1GiB under engine",
                )
            )
        for index, arg in enumerate(self.extra_args):
            flag = _flag_name(arg)
            if flag in _MANAGED_FLAGS:
                problems.append(
                    Problem(
                        ("extra_args", index),
                        f"{flag} is set by deskside from {_MANAGED_FLAGS[flag]}",
                        f"remove it from extra_args and set {_MANAGED_FLAGS[flag]} instead",
                    )
                )
        if problems:
            raise RecipeProblems(problems)
        return self


class Runtime(BaseModel):
    """How the engine runs on each node."""

    model_config = _CONFIG

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
    shm_size: Annotated[str, AfterValidator(_check_shm)] = Field(
        "64g", description="Shared memory for the container (Docker --shm-size)."
    )
    python: NoSpace | None = Field(
        None, description="native: the Python interpreter that has vLLM. None: 'python3'."
    )
    systemd: bool = Field(
        True, description="Install systemd units so the service comes back after a reboot."
    )


class Proxy(BaseModel):
    """An OpenAI-compatible proxy in front of the engine."""

    model_config = _CONFIG

    enabled: bool = Field(False, description="Run the proxy on the head node.")
    kind: Literal["litellm"] = Field("litellm", description="Proxy implementation.")
    port: Port = Field(4000, description="Port the proxy listens on.")
    master_key_file: NoSpace | None = Field(
        None,
        description="File on the head node holding the proxy's master key. None: no key.",
    )


class Monitoring(BaseModel):
    """Prometheus, Grafana and node_exporter."""

    model_config = _CONFIG

    enabled: bool = Field(
        False, description="Deploy Prometheus and Grafana (head) and node_exporter (every node)."
    )
    prometheus_port: Port = Field(9090, description="Prometheus port on the head node.")
    grafana_port: Port = Field(3000, description="Grafana port on the head node.")
    node_exporter_port: Port = Field(9100, description="node_exporter port on every node.")
    scrape_interval: Annotated[str, AfterValidator(_check_duration)] = Field(
        "15s", description="Prometheus scrape interval (a Prometheus duration: 15s, 1m)."
    )


class Guard(BaseModel):
    """Run-time safety limits."""

    model_config = _CONFIG

    min_headroom: ByteSize | None = Field(
        None,
        description="Least memory left outside vLLM on a node (e.g. '21GiB'); overrides the "
        "hardware profile's safety floor.",
    )
    kv_usage_warn: float = Field(
        0.9, gt=0, le=1, description="Warn when KV cache usage passes this fraction."
    )
    min_spec_acceptance: float = Field(
        0.3,
        ge=0,
        le=1,
        description="Warn when the speculative draft acceptance rate falls below this.",
    )


_DIGEST_RE = re.compile(r"\S+@sha256:[0-9a-f]{64}")
_DIGEST_HINT = (
    "pin the image by digest: run `docker pull IMAGE:TAG` and then `docker inspect "
    "--format '{{index .RepoDigests 0}}' IMAGE:TAG`, or `docker buildx imagetools inspect "
    "IMAGE:TAG`, and write image: name:tag@sha256:<digest>"
)


class Recipe(BaseModel):
    """A deskside recipe: these nodes, this model, this engine profile."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        allow_inf_nan=False,
        title="deskside recipe",
    )

    version: Literal[1] = Field(1, description="Recipe format version.")
    name: Slug = Field(description="Name of the deployment (a slug: lowercase, digits, '-').")
    description: str = Field("", description="Free text describing the recipe.")
    cluster: Cluster = Field(description="The nodes and the fabric between them.")
    model: Model = Field(description="The model to serve.")
    engine: Engine = Field(description="The vLLM engine settings.")
    runtime: Runtime = Field(
        default_factory=Runtime, description="How the engine runs on the nodes."
    )
    proxy: Proxy = Field(default_factory=Proxy, description="Optional LiteLLM proxy.")
    monitoring: Monitoring = Field(
        default_factory=Monitoring, description="Optional Prometheus/Grafana monitoring."
    )
    guard: Guard = Field(
        default_factory=Guard,
        description="Safety limits watched while serving: memory headroom, KV cache usage, "
        "draft acceptance.",
    )

    @model_validator(mode="after")
    def _rules(self) -> Recipe:
        problems = [
            *self._node_problems(),
            *self._engine_problems(),
            *self._runtime_problems(),
            *self._port_problems(),
        ]
        if problems:
            raise RecipeProblems(problems)
        return self

    def _node_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        nodes = self.cluster.nodes
        heads = [i for i, node in enumerate(nodes) if node.role == "head"]
        if not heads:
            problems.append(
                Problem(
                    ("cluster", "nodes"),
                    "no node has role 'head'",
                    "set role: head on the node that serves the API (exactly one)",
                )
            )
        for index in heads[1:]:
            problems.append(
                Problem(
                    ("cluster", "nodes", index, "role"),
                    f"a second head: cluster.nodes[{heads[0]}] ({nodes[heads[0]].name!r}) is "
                    "the head already; there must be exactly one",
                    "set role: worker here",
                )
            )
        for field in ("name", "address"):
            first: dict[str, int] = {}
            for index, node in enumerate(nodes):
                value = getattr(node, field)
                if value in first:
                    problems.append(
                        Problem(
                            ("cluster", "nodes", index, field),
                            f"node {field} {value!r} is used by cluster.nodes[{first[value]}] "
                            "already",
                            f"every node needs its own {field}",
                        )
                    )
                else:
                    first[value] = index
        fabric_first: dict[IPv4Address, int] = {}
        for index, node in enumerate(nodes):
            if node.fabric is None:
                continue
            if node.fabric.address in fabric_first:
                problems.append(
                    Problem(
                        ("cluster", "nodes", index, "fabric", "address"),
                        f"fabric address {node.fabric.address} is used by "
                        f"cluster.nodes[{fabric_first[node.fabric.address]}] already",
                        "every node needs its own fabric address",
                    )
                )
            else:
                fabric_first[node.fabric.address] = index
        for index, node in enumerate(nodes):
            profile = PROFILES[node.hardware]
            if profile.device != self.engine.device:
                problems.append(
                    Problem(
                        ("cluster", "nodes", index, "hardware"),
                        f"hardware {node.hardware!r} runs vLLM on {profile.device}, but "
                        f"engine.device is {self.engine.device!r}",
                        f"set engine.device: {profile.device}, or pick a "
                        f"{self.engine.device} hardware profile",
                    )
                )
        netns_first: dict[str, int] = {}
        for index, node in enumerate(nodes):
            if node.netns is None:
                continue
            if node.fabric is None:
                problems.append(
                    Problem(
                        ("cluster", "nodes", index, "netns"),
                        f"node {node.name!r} runs in a network namespace but has no fabric "
                        "interface and address for it",
                        "add fabric: {interface: <veth name, e.g. ds-veth0>, address: <IPv4>}",
                    )
                )
            if node.ssh is not None:
                problems.append(
                    Problem(
                        ("cluster", "nodes", index, "netns"),
                        "netns runs the node on this machine; ssh says it is remote",
                        "keep one of netns and ssh",
                    )
                )
            if node.netns in netns_first:
                problems.append(
                    Problem(
                        ("cluster", "nodes", index, "netns"),
                        f"network namespace {node.netns!r} is used by "
                        f"cluster.nodes[{netns_first[node.netns]}] already",
                        "every node needs its own namespace",
                    )
                )
            else:
                netns_first[node.netns] = index
        if self.cluster.fabric.transport == "roce":
            for index, node in enumerate(nodes):
                if node.fabric is None or not node.fabric.hcas:
                    where: LocPath = ("cluster", "nodes", index)
                    if node.fabric is not None:
                        where = (*where, "fabric")
                    problems.append(
                        Problem(
                            where,
                            f"transport 'roce' needs the RDMA devices of node {node.name!r}",
                            "add fabric: {interface: <netdev>, address: <fabric IPv4>, "
                            "hcas: [<device>, ...]} to the node (devices are listed in "
                            "/sys/class/infiniband)",
                            fallback_locs=(("cluster", "fabric", "transport"),),
                        )
                    )
        return problems

    def _engine_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        engine = self.engine
        node_count = len(self.cluster.nodes)
        if engine.nnodes != node_count:
            problems.append(
                Problem(
                    ("engine", "nnodes"),
                    f"engine.nnodes is {engine.nnodes} but cluster.nodes lists {node_count} "
                    f"node{'s' if node_count != 1 else ''}",
                    f"set nnodes: {node_count}, or list {engine.nnodes} nodes",
                    fallback_locs=(("engine",),),
                )
            )
        total_gpus = sum(node.gpus for node in self.cluster.nodes)
        ranks = engine.tensor_parallel_size * engine.pipeline_parallel_size
        if ranks != total_gpus:
            per_node = " + ".join(str(node.gpus) for node in self.cluster.nodes)
            problems.append(
                Problem(
                    ("engine", "tensor_parallel_size"),
                    f"tensor_parallel_size × pipeline_parallel_size = "
                    f"{engine.tensor_parallel_size} × {engine.pipeline_parallel_size} = "
                    f"{ranks} engine rank{'s' if ranks != 1 else ''}, but the nodes have "
                    f"{per_node} = {total_gpus} GPU{'s' if total_gpus != 1 else ''}; every GPU "
                    "runs exactly one rank",
                    f"make tensor_parallel_size × pipeline_parallel_size equal {total_gpus}, "
                    "or change the nodes' gpus",
                    fallback_locs=(("engine", "pipeline_parallel_size"), ("engine",)),
                )
            )
        return problems

    def _runtime_problems(self) -> list[Problem]:
        if self.runtime.kind != "container":
            return []
        image = self.engine.image
        if image is None:
            return [
                Problem(
                    ("runtime", "kind"),
                    "runtime 'container' needs engine.image",
                    "set engine.image to the vLLM image pinned by digest "
                    "(name:tag@sha256:<digest>), or use runtime.kind: native",
                    fallback_locs=(("engine",),),
                )
            ]
        if _DIGEST_RE.fullmatch(image) is None:
            return [
                Problem(
                    ("engine", "image"),
                    f"image {image!r} is not pinned by digest; a tag can be re-pushed, so "
                    "the container runtime needs name:tag@sha256:<64 hex digits>",
                    _DIGEST_HINT,
                )
            ]
        return []

    def _port_problems(self) -> list[Problem]:
        """Ports that would clash on the head node."""
        used: list[tuple[int, LocPath]] = [(self.engine.port, ("engine", "port"))]
        if len(self.cluster.nodes) > 1 or self.engine.nnodes > 1:
            used.append((self.cluster.fabric.master_port, ("cluster", "fabric", "master_port")))
        if self.proxy.enabled:
            used.append((self.proxy.port, ("proxy", "port")))
        if self.monitoring.enabled:
            used.extend(
                (getattr(self.monitoring, name), ("monitoring", name))
                for name in ("prometheus_port", "grafana_port", "node_exporter_port")
            )
        problems: list[Problem] = []
        taken: dict[int, LocPath] = {}
        for port, loc in used:
            if port in taken:
                other = ".".join(str(part) for part in taken[port])
                problems.append(
                    Problem(
                        loc,
                        f"port {port} is already used by {other} on the head node",
                        "pick a free port",
                        fallback_locs=((loc[0],),),
                    )
                )
            else:
                taken[port] = loc
        return problems

    @property
    def head(self) -> Node:
        """The head node (runs the API server and rank 0)."""
        for node in self.cluster.nodes:
            if node.role == "head":
                return node
        raise LookupError("recipe has no head node")  # pragma: no cover - validated

    @property
    def workers(self) -> list[Node]:
        """The worker nodes, in recipe order."""
        return [node for node in self.cluster.nodes if node.role == "worker"]


__all__ = [
    "Cluster",
    "Engine",
    "Fabric",
    "Guard",
    "Model",
    "Monitoring",
    "Node",
    "NodeFabric",
    "Problem",
    "Proxy",
    "Recipe",
    "RecipeProblems",
    "Runtime",
    "Speculative",
    "Ssh",
    "did_you_mean",
]
