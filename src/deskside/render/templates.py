"""The Jinja environment of the line-oriented artefacts (sh scripts, env files, systemd
units). Structured formats (Compose, LiteLLM and Prometheus YAML, dashboards, the lock)
are built as data and serialised instead: no string templating for YAML or JSON.

Templates never see a raw recipe value where it could be live: callers pass values through
the format's quoting filter (`sh`) or pre-quote them (`deskside.render.quote`).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from deskside.render import quote


@cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("deskside.render", "templates"),
        autoescape=False,
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["sh"] = quote.sh
    return env


def render_template(name: str, **values: Any) -> str:
    return environment().get_template(name).render(**values)
