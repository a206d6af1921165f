"""The shape of the code base: no import cycle anywhere in src/deskside, counting every
import statement (those inside functions too, and a `from deskside.x import y` as an import
of the package `deskside.x` as well); no module over 500 lines; the pure core (recipe,
planner, layout, launch, render) imports nothing that touches a host; the layers above the
runtime (operate, diagnose, doctor, replica sets) are never imported from below."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).parents[2] / "src"
MAX_LINES = 500
# the planner's one boundary, `planner.inputs`, reads config.json files and this machine's
# CPU flags (through its Transport); everything else of the planner is pure
PURE = (
    "deskside.recipe",
    "deskside.planner.plan",
    "deskside.planner.types",
    "deskside.planner.kv",
    "deskside.planner.families",
    "deskside.planner.registry",
    "deskside.planner.engine_config",
    "deskside.planner.inert",
    "deskside.layout",
    "deskside.engine.launch",
    "deskside.engine.services",
    "deskside.render",
    "deskside.survive",
)
HOST_TOUCHING = (
    "deskside.transport",
    "deskside.runtime",
    "deskside.deploy",
    "deskside.cli",
    "subprocess",
    "httpx",
    "asyncssh",
    "socket",
)


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / "deskside").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module `name` imports (any import statement, anywhere in the file): the
    deepest known module each imported name resolves to, and every package on the way."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        for target in targets:
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                candidate = ".".join(parts[:i])
                if candidate in known and candidate != name:
                    found.add(candidate)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports(name, path, known) for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle() -> None:
    g = graph()
    # packages count as modules: deskside.planner.x imports deskside.planner too
    assert "deskside.planner" in g["deskside.planner.plan"] or not g["deskside.planner.plan"]
    assert cycles(g) == []


@pytest.mark.parametrize("name", sorted(modules()))
def test_module_size(name: str) -> None:
    lines = modules()[name].read_text().count("\n")
    assert lines <= MAX_LINES, f"{name}: {lines} lines (split it along its seams)"


def test_the_core_is_pure() -> None:
    """Recipe, planner, layout, launch and render reach no host: no transport, runtime,
    subprocess or network client, directly or through anything they import."""
    g = graph()
    mods = modules()
    for name in mods:
        if not name.startswith(PURE):
            continue
        seen: set[str] = set()
        todo = [name]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            todo += g.get(current, set())
        source = {m for m in seen if m.startswith(HOST_TOUCHING)}
        assert not source, f"{name} reaches {sorted(source)}"
        text = mods[name].read_text()
        for lib in ("subprocess", "httpx", "asyncssh", "socket"):
            assert f"import {lib}" not in text, f"{name} imports {lib}"


def test_facts_import_only_the_transport_errors_and_units() -> None:
    """A fact is a command and a pure parser: the facts layer reads nodes through a
    Transport and knows nothing of recipes, runtimes or commands."""
    allowed = ("deskside.facts", "deskside.transport", "deskside.errors", "deskside.units")
    g = graph()
    for name, deps in g.items():
        if not name.startswith("deskside.facts"):
            continue
        inner = {d for d in deps if d.startswith("deskside.") or d == "deskside"}
        inner.discard("deskside")
        bad = {d for d in inner if not d.startswith(allowed)}
        assert not bad, f"{name} imports {sorted(bad)}"


def test_no_module_outside_the_cli_imports_it() -> None:
    """The CLI is a thin face: the library never reaches back into it."""
    g = graph()
    bad = {
        name: sorted(d for d in deps if d.startswith("deskside.cli"))
        for name, deps in g.items()
        if not name.startswith("deskside.cli") and any(d.startswith("deskside.cli") for d in deps)
    }
    assert bad == {}


def test_deploy_runtime_and_models_import_no_command_package() -> None:
    """`up` reads what the nodes must share through `facts`, not through `deskside doctor`;
    the model tools need nothing of the deploy."""
    g = graph()
    for name, deps in g.items():
        if name.startswith(("deskside.deploy", "deskside.runtime", "deskside.models")):
            bad = {d for d in deps if d.startswith("deskside.doctor")}
            assert not bad, f"{name} imports {sorted(bad)}"
        if name.startswith("deskside.models"):
            bad = {d for d in deps if d.startswith("deskside.deploy")}
            assert not bad, f"{name} imports {sorted(bad)}"


def test_records_import_only_what_a_store_needs() -> None:
    """The record store knows where records live, reads and writes them and resolves names
    to runs and recipes; it knows nothing of runtimes, deploys, commands or checks. Besides
    the pure recipe and layout it reaches files through safefs, smallfile and a Transport
    (`locks` for a run's lock, `localnet` for the name of a run's bridge)."""
    allowed = (
        "deskside.records",
        "deskside.errors",
        "deskside.home",
        "deskside.safefs",
        "deskside.smallfile",
        "deskside.layout",
        "deskside.recipe",
        "deskside.transport",
        "deskside.units",
        "deskside.locks",
        "deskside.localnet",
    )
    g = graph()
    seen = 0
    for name, deps in g.items():
        if not name.startswith("deskside.records"):
            continue
        seen += 1
        inner = {d for d in deps if d.startswith("deskside.")}
        bad = {d for d in inner if not d.startswith(allowed)}
        assert not bad, f"{name} imports {sorted(bad)}"
    assert seen > 1, "the record store is not where this test looks for it"


def test_the_exporter_reads_and_never_acts() -> None:
    """The exporter serves what it reads: it imports nothing that stops engines or starts
    them (the guard, runtimes, deploys, recoveries)."""
    acting = (
        "deskside.guard",
        "deskside.runtime",
        "deskside.deploy",
        "deskside.replicas",
        "deskside.operate",
    )
    for name, deps in graph().items():
        if name.startswith("deskside.exporter"):
            bad = {d for d in deps if d.startswith(acting)}
            assert not bad, f"{name} imports {sorted(bad)}"


def _files_holding(pattern: str) -> set[str]:
    found = set()
    for path in (SRC / "deskside").rglob("*"):
        if path.suffix in (".py", ".j2", ".sh") and re.search(pattern, path.read_text()):
            found.add(str(path.relative_to(SRC)))
    return found


def test_process_identity_is_written_down_once() -> None:
    """vLLM's process-title rule and the run tag's variable name each live in one module;
    /proc/PID/stat is split in one Python module (the on-node stop keeps its own atomic
    check-then-signal in sh, tested to agree with it)."""
    assert _files_holding(r"VLLM::") == {"deskside/facts/procs.py"}
    assert _files_holding(r"DESKSIDE_RUN") == {"deskside/facts/__init__.py"}
    splitters = _files_holding(r'##\*\) |r(partition|find|split|index)\("\)')
    assert splitters == {"deskside/facts/procs.py", "deskside/runtime/node_sh.py"}


def importers(g: dict[str, set[str]], package: str) -> set[str]:
    """The modules outside `package` that import something of it."""
    return {
        name
        for name, deps in g.items()
        if not name.startswith(package + ".")
        and name != package
        and any(d == package or d.startswith(package + ".") for d in deps)
    }


def test_the_runtime_reaches_no_operation_nor_command() -> None:
    """A Runtime starts, stops and reads clusters; operating them (status, watch, restart),
    diagnosing, doctoring and replica sets are built on it, never the other way."""
    above = ("deskside.operate", "deskside.diagnose", "deskside.doctor", "deskside.replicas")
    g = graph()
    seen = 0
    for name, deps in g.items():
        if name == "deskside.runtime" or name.startswith("deskside.runtime."):
            seen += 1
            bad = {d for d in deps if d.startswith(above)}
            assert not bad, f"{name} imports {sorted(bad)}"
    assert seen > 5, "the runtime is not where this test looks for it"


@pytest.mark.parametrize(
    ("package", "allowed"),
    [
        # operating clusters: the faces, a diagnosis (its bundle holds the status) and the
        # tuner (it starts and stops each point's engine through the run's runtime)
        ("deskside.operate", ("deskside.cli", "deskside.diagnose", "deskside.tune")),
        # a diagnosis: the faces only (the watcher is handed its bundle by `node watch`)
        ("deskside.diagnose", ("deskside.cli",)),
        # doctor: the faces, and a diagnosis (its bundle holds doctor's findings)
        ("deskside.doctor", ("deskside.cli", "deskside.diagnose")),
    ],
)
def test_nothing_below_the_commands_imports_them(package: str, allowed: tuple[str, ...]) -> None:
    g = graph()
    assert any(name.startswith(package + ".") for name in g), f"no {package} package"
    bad = sorted(name for name in importers(g, package) if not name.startswith(allowed))
    assert bad == [], f"{package} is imported by {bad}"


def test_the_importers_finder_finds_importers() -> None:
    g = {"a.x": {"b.y"}, "b.y": set(), "b": set(), "c": {"b"}, "b.z": {"b.y"}}
    assert importers(g, "b") == {"a.x", "c"}


def test_every_http_client_is_bounded() -> None:
    """HTTP clients come from `deskside.httpclient` (a total deadline and a byte cap on
    every exchange); no module builds a bare httpx client."""
    assert _files_holding(r"httpx\.(Async)?Client\(") == {"deskside/httpclient.py"}
