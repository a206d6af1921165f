"""Fuzz the loader: any text gives a Recipe or a located RecipeError, never anything else.

(a) arbitrary text, and text made of YAML's special characters;
(b) structural mutations of the valid local recipe (keys deleted or renamed, values replaced
    by random scalars or wrong types, extra nesting) and text mutations of it (duplicated,
    dropped or swapped lines, tabs, truncation, inserted characters).
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from deskside.errors import RecipeError
from deskside.recipe.load import format_recipe_error, load_recipe_text
from deskside.recipe.types import Recipe

LOCAL = Path(__file__).resolve().parents[2] / "recipes" / "local-tiny.yaml"
LOCAL_TEXT = LOCAL.read_text(encoding="utf-8")
LOCAL_DATA: dict[str, Any] = YAML(typ="safe").load(LOCAL_TEXT)

FUZZ = settings(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def check(text: str) -> None:
    """The loader's contract for any input text."""
    lines = text.count("\n") + 1
    try:
        result = load_recipe_text(text, "fuzz.yaml")
    except RecipeError as err:
        assert err.exit_code == 2
        assert err.problems
        for problem in [err, *err.problems]:
            assert problem.location is not None, problem.message
            assert problem.location.path == "fuzz.yaml"
            assert problem.location.line is not None, problem.message
            assert 1 <= problem.location.line <= lines, (problem.location, lines)
            assert problem.location.column is not None and problem.location.column >= 1
            assert problem.message.startswith("fuzz.yaml:")
        shown = format_recipe_error(err)
        assert isinstance(shown, str) and "fuzz.yaml:" in shown
    else:
        assert isinstance(result, Recipe)


# --------------------------------------------------------------------------- (a) any text

YAML_ALPHABET = list(" \n\t:-[]{},#&*!|>'\"%@`?~.\\0123456789abcxyz\x00\x85\u2028\ufeff")


@settings(FUZZ, max_examples=300)
@given(st.text())
def test_arbitrary_text(text: str) -> None:
    check(text)


@settings(FUZZ, max_examples=300)
@given(st.text(alphabet=st.sampled_from(YAML_ALPHABET), max_size=200))
def test_yaml_punctuation(text: str) -> None:
    check(text)


# --------------------------------------------------------------------------- (b) mutations

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        ["auto", "1GiB", "0", "-1", "head", "worker", "cpu", "gb10", "roce", "yes", "~", "null"]
    ),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(max_size=8), inner, max_size=3),
    ),
    max_leaves=6,
)


def paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside nested dicts and lists."""
    found = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            found.extend(paths(value, (*prefix, key)))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found.extend(paths(value, (*prefix, index)))
    return found


def copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [copy(v) for v in data]
    return data


def container_at(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        data = data[part]
    return data


@st.composite
def mutated_data(draw: st.DrawFn) -> Any:
    data = copy(LOCAL_DATA)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        candidates = [p for p in paths(data) if p]
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        parent = container_at(data, path[:-1])
        last = path[-1]
        action = draw(st.sampled_from(["delete", "rename", "replace", "nest", "listify"]))
        if action == "delete":
            del parent[last]
        elif action == "rename" and isinstance(parent, dict):
            new_key = draw(
                st.one_of(
                    st.text(max_size=12),
                    st.just(str(last) + draw(st.sampled_from(["n", "_", "s"]))),
                    st.just(str(last)[:-1]),
                )
            )
            parent[new_key] = parent.pop(last)
        elif action == "replace":
            parent[last] = draw(VALUES)
        elif action == "nest":
            parent[last] = {draw(st.text(max_size=6)): parent[last]}
        else:
            parent[last] = [parent[last]]
    return data


def dump(data: Any) -> str:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    stream = io.StringIO()
    yaml.dump(data, stream)
    return stream.getvalue()


@settings(FUZZ, max_examples=400)
@given(mutated_data())
def test_structural_mutations(data: Any) -> None:
    check(dump(data))


@st.composite
def mutated_text(draw: st.DrawFn) -> str:
    lines = LOCAL_TEXT.splitlines(keepends=True)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        if not lines:
            break
        index = draw(st.integers(min_value=0, max_value=len(lines) - 1))
        action = draw(
            st.sampled_from(["duplicate", "drop", "swap", "tab", "insert", "truncate", "indent"])
        )
        if action == "duplicate":
            lines.insert(index, lines[index])
        elif action == "drop":
            del lines[index]
        elif action == "swap":
            other = draw(st.integers(min_value=0, max_value=len(lines) - 1))
            lines[index], lines[other] = lines[other], lines[index]
        elif action == "tab":
            lines[index] = "\t" + lines[index].lstrip(" ")
        elif action == "indent":
            lines[index] = " " * draw(st.integers(min_value=1, max_value=5)) + lines[index]
        elif action == "insert":
            line = lines[index]
            at = draw(st.integers(min_value=0, max_value=len(line)))
            lines[index] = line[:at] + draw(st.text(max_size=6)) + line[at:]
        else:
            text = "".join(lines)
            cut = draw(st.integers(min_value=0, max_value=len(text)))
            lines = text[:cut].splitlines(keepends=True)
    return "".join(lines)


@settings(FUZZ, max_examples=300)
@given(mutated_text())
def test_text_mutations(text: str) -> None:
    check(text)


def test_the_unmutated_recipe_loads() -> None:
    check(LOCAL_TEXT)
    check(dump(LOCAL_DATA))
    assert isinstance(load_recipe_text(dump(LOCAL_DATA)), Recipe)


def test_special_floats_and_huge_numbers() -> None:
    for value in (math.nan, math.inf, -math.inf, 10**400, -(10**400), 2**64):
        data = copy(LOCAL_DATA)
        data["engine"]["max_num_seqs"] = value
        data["engine"]["port"] = value
        check(dump(data))
    check("engine:\n  port: 0x" + "f" * 5000 + "\n")
    check("engine:\n  port: " + "9" * 5000 + "\n")
    check("a: !!float nope\n")
    check("[" * 3000)
    check("a: &x [1, *x]\n" * 2)
    check("a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n" * 1)
