"""What `deskside probe` probes: the run's doors (engine API, proxy), its names, and the
engine settings the probes depend on, read from the recipe and the run record."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from deskside.recipe.rules import flag_name
from deskside.recipe.types import Recipe
from deskside.records.run import RunRecord

# The DSpark engine image reads this variable: client stop strings stay dormant until the
# reasoning ends at </think>. Upstream vLLM has no such setting.
STOPS_AFTER_REASONING_ENV = "DSPARK_SUPPRESS_STOPS_IN_REASONING"
TRUE_WORDS = ("1", "true", "yes", "on")


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value `args` (vLLM command-line arguments) give `flag` (`--x v` or `--x=v`;
    "" for a flag without a value), the last one winning; None when absent."""
    found: str | None = None
    for i, arg in enumerate(args):
        if flag_name(arg) != flag:
            continue
        if "=" in arg:
            found = arg.split("=", 1)[1]
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            found = args[i + 1]
        else:
            found = ""
    return found


@dataclass(frozen=True)
class EngineTraits:
    """The engine settings the probes look at."""

    max_num_seqs: int | None = None
    max_model_len: int | None = None  # None: "auto" (the engine says)
    tool_call_parser: str | None = None
    auto_tool_choice: bool = False
    reasoning_parser: str | None = None
    stops_after_reasoning: bool = False


def engine_traits(
    extra_args: Sequence[str],
    env: Mapping[str, str],
    max_num_seqs: int | None = None,
    max_model_len: int | None = None,
) -> EngineTraits:
    """What the recipe's `engine.extra_args` and `engine.env` configure for the probes."""
    return EngineTraits(
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        tool_call_parser=flag_value(extra_args, "--tool-call-parser") or None,
        auto_tool_choice=flag_value(extra_args, "--enable-auto-tool-choice") is not None,
        reasoning_parser=flag_value(extra_args, "--reasoning-parser") or None,
        stops_after_reasoning=env.get(STOPS_AFTER_REASONING_ENV, "").strip().lower() in TRUE_WORDS,
    )


@dataclass(frozen=True)
class ProbeTarget:
    """A running cluster as the probes see it. Headers carry the keys: never print them."""

    recipe_name: str
    api_url: str
    proxy_url: str | None
    served_names: list[str]
    traits: EngineTraits
    engine_headers: dict[str, str] = field(default_factory=dict, repr=False)
    proxy_headers: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def model(self) -> str:
        """The name the engine probes send (the served name)."""
        return self.served_names[0]


def probe_target(
    recipe: Recipe,
    run: RunRecord,
    engine_headers: Mapping[str, str] | None,
    proxy_headers: Mapping[str, str] | None,
) -> ProbeTarget:
    e = recipe.engine
    return ProbeTarget(
        recipe_name=run.recipe_name,
        api_url=run.api_url,
        proxy_url=run.proxy_url,
        served_names=list(run.served_names) or list(recipe.model.all_names),
        traits=engine_traits(
            e.extra_args,
            e.env,
            e.max_num_seqs,
            e.max_model_len if isinstance(e.max_model_len, int) else None,
        ),
        engine_headers=dict(engine_headers or {}),
        proxy_headers=dict(proxy_headers or {}),
    )
