"""Pydantic's validation errors in plain words: what is wrong, and what to write instead.

`describe_error` turns one pydantic error (at a path that exists in the user's data) into a
message and a hint: a missing key says where to add it, an unknown key suggests the closest
valid one (or the section where it belongs), a quoted number says to remove the quotes, a
number where text is expected says to quote it, and so on. Field descriptions of the models
serve as hints where nothing more specific applies.
"""

from __future__ import annotations

import datetime
import re
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from deskside.recipe.problems import LocPath, did_you_mean, format_field
from deskside.recipe.types import Recipe


def describe_value(value: object) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"the number {_short_number(value)}"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"the text {shown!r}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, datetime.date):
        return f"a date ({value.isoformat()})"
    return f"a {type(value).__name__}"


def _yaml_text(value: object) -> str:
    """How a scalar would read in YAML, for 'quote it' hints."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.date):
        return value.isoformat()
    if value is None:
        return ""
    return str(value)


# ----- the model tree: which model and field a path leads to


def _unwrap(annotation: Any) -> list[Any]:
    """The concrete types an annotation may hold (Annotated and unions flattened)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _unwrap(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        out: list[Any] = []
        for arg in get_args(annotation):
            out.extend(_unwrap(arg))
        return out
    return [annotation]


def _descend(annotation: Any, part: str | int) -> Any:
    for candidate in _unwrap(annotation):
        if (
            isinstance(candidate, type)
            and issubclass(candidate, BaseModel)
            and isinstance(part, str)
            and part in candidate.model_fields
        ):
            return candidate.model_fields[part].annotation
        origin = get_origin(candidate)
        args = get_args(candidate)
        if origin is list and isinstance(part, int) and args:
            return args[0]
        if origin is dict and len(args) == 2:
            return args[1]
    return None


def _model_at(loc: LocPath) -> type[BaseModel] | None:
    annotation: Any = Recipe
    for part in loc:
        annotation = _descend(annotation, part)
        if annotation is None:
            return None
    for candidate in _unwrap(annotation):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _field_at(loc: LocPath) -> FieldInfo | None:
    if not loc or not isinstance(loc[-1], str):
        return None
    model = _model_at(loc[:-1])
    if model is None:
        return None
    return model.model_fields.get(loc[-1])


def _sections() -> dict[str, list[str]]:
    """Field name -> the section paths where it is a valid key (for 'belongs under')."""
    found: dict[str, list[str]] = {}

    def walk(model: type[BaseModel], where: str, depth: int) -> None:
        for name, info in model.model_fields.items():
            found.setdefault(name, []).append(where or "the top level")
            if depth > 4:
                continue
            for candidate in _unwrap(info.annotation):
                inner = candidate
                if get_origin(candidate) is list and get_args(candidate):
                    inner = _unwrap(get_args(candidate)[0])[0]
                    suffix = "[]"
                else:
                    suffix = ""
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    section = f"{where}.{name}{suffix}" if where else f"{name}{suffix}"
                    walk(inner, section, depth + 1)

    walk(Recipe, "", 0)
    return found


_SECTIONS = _sections()


def _hint_for_field(loc: LocPath) -> str | None:
    info = _field_at(loc)
    if info is None or not info.description:
        return None
    name = loc[-1]
    return f"{name}: {info.description}"


def _literal_choices(loc: LocPath, ctx: dict[str, Any]) -> list[object]:
    """The values a Literal field allows: from the model, else from pydantic's message."""
    info = _field_at(loc)
    if info is not None:
        for candidate in _unwrap(info.annotation):
            if get_origin(candidate) is Literal:
                return list(get_args(candidate))
    expected = str(ctx.get("expected", ""))
    return [m.group(1) for m in re.finditer(r"'((?:[^'\\]|\\.)*)'", expected)]


def _show_choice(choice: object) -> str:
    return f"'{choice}'" if isinstance(choice, str) else str(choice)


def _value_at(data: Any, loc: LocPath) -> Any:
    current = data
    for part in loc:
        in_dict = isinstance(current, dict) and part in current
        in_list = isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current)
        if not (in_dict or in_list):
            return None
        current = current[part]
    return current


def describe_error(error: Any, loc: LocPath, data: Any) -> tuple[str, str | None]:
    kind = str(error.get("type", ""))
    ctx: dict[str, Any] = error.get("ctx") or {}
    value = error.get("input")
    if kind not in ("missing",):
        # pydantic's `input` may be a sub-value for union members; prefer the user's value
        from_data = _value_at(data, loc)
        if from_data is not None or value is None:
            value = from_data
    shown = describe_value(value)
    field_hint = _hint_for_field(loc)
    name = loc[-1] if loc else None
    hint: str | None

    if kind == "missing":
        parent = format_field(loc[:-1]) or "the top level"
        where = f"under '{parent}'" if loc[:-1] else "at the top level"
        hint = f"add '{name}:' {where}"
        if field_hint:
            hint += f" ({field_hint})"
        return "required key is missing", hint

    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        valid = list(model.model_fields) if model is not None else []
        guess = did_you_mean(str(name), valid) if valid else None
        if guess:
            return "unknown key", f"did you mean '{guess}'?"
        elsewhere = [
            place for place in _SECTIONS.get(str(name), []) if place != _section_name(loc[:-1])
        ]
        if elsewhere:
            return "unknown key", f"'{name}' belongs under {' or '.join(elsewhere)}"
        return "unknown key", f"valid keys here: {', '.join(valid)}" if valid else None

    if kind == "int_parsing_size":
        return "the number has far too many digits", field_hint

    if kind in ("int_type", "int_parsing", "int_from_float"):
        hint = field_hint
        if isinstance(value, str) and re.fullmatch(r"\s*-?[0-9]+\s*", value):
            hint = "remove the quotes: numbers are written bare"
        elif isinstance(value, float):
            hint = "write a whole number (no decimal point)"
        return f"expected a whole number, got {shown}", hint

    if kind in ("float_type", "float_parsing"):
        hint = field_hint
        if isinstance(value, str):
            hint = "remove the quotes: numbers are written bare"
        return f"expected a number, got {shown}", hint

    if kind == "finite_number":
        return f"expected a finite number, got {shown}", field_hint

    if kind in ("bool_type", "bool_parsing"):
        return f"expected true or false, got {shown}", "write true or false, without quotes"

    if kind == "string_type":
        if isinstance(value, bool | int | float | datetime.date) or value is None:
            return (
                f"expected text, got {shown}",
                f'quote it: "{_yaml_text(value)}" (YAML reads it as a number, boolean, date '
                "or null otherwise)",
            )
        return f"expected text, got {shown}", field_hint

    if kind == "string_too_short":
        return "must not be empty", field_hint
    if kind == "string_too_long":
        return f"is too long (at most {ctx.get('max_length')} characters)", field_hint

    bounds = {
        "greater_than": ("greater than", "gt"),
        "greater_than_equal": ("at least", "ge"),
        "less_than": ("less than", "lt"),
        "less_than_equal": ("at most", "le"),
    }
    if kind in bounds:
        words, key = bounds[kind]
        limit = ctx.get(key)
        return f"must be {words} {limit}, got {_short_number(value)}", field_hint

    if kind == "literal_error":
        choices = _literal_choices(loc, ctx)
        listed = ", ".join(_show_choice(c) for c in choices)
        texts = [c for c in choices if isinstance(c, str)]
        guess = did_you_mean(value, texts) if isinstance(value, str) and texts else None
        if guess:
            hint = f"did you mean '{guess}'?"
        elif isinstance(value, str) and any(value == str(c) for c in choices):
            hint = "remove the quotes: numbers are written bare"
        elif not isinstance(value, str) and any(_yaml_text(value) == c for c in texts):
            hint = f'quote it: "{_yaml_text(value)}"'
        else:
            hint = f"choose one of {listed}"
        return f"must be one of {listed}; got {shown}", hint

    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return (
            f"expected a mapping (indented 'key: value' lines), got {shown}",
            field_hint or "write the keys of this section on indented lines below it",
        )

    if kind in ("list_type", "tuple_type", "set_type"):
        return (
            f"expected a list, got {shown}",
            "write the items as '- item' lines below the key, or inline as [a, b]",
        )

    if kind == "too_short":
        minimum = ctx.get("min_length", 1)
        return f"needs at least {minimum} item{'s' if minimum != 1 else ''}", field_hint
    if kind == "too_long":
        return f"has too many items (at most {ctx.get('max_length')})", field_hint

    if kind in ("ip_v4_address", "ip_any_address", "ip_v4_interface"):
        return (
            f"expected an IPv4 address, got {shown}",
            "write four numbers 0-255 separated by dots, e.g. 192.168.100.1",
        )

    if kind in ("value_error", "assertion_error"):
        cause = ctx.get("error")
        text = str(cause) if cause is not None else str(error.get("msg", ""))
        return text, field_hint

    return str(error.get("msg", "invalid value")), field_hint


def _short_number(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"a {int(value.bit_length() * 0.30103) + 1}-digit number"
    return str(value)


def _section_name(loc: LocPath) -> str:
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            if parts:
                parts[-1] += "[]"
        else:
            parts.append(part)
    return ".".join(parts) or "the top level"


__all__ = ["describe_error", "describe_value"]
