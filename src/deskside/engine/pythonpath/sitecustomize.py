"""Run at start-up by every Python process whose ``PYTHONPATH`` starts with this folder
(the CPU launcher, :mod:`deskside.engine.cpu`, sets it for the processes vLLM starts):
hide the packages that break beside the CPU torch and answer vLLM's version lookup, before
anything imports vLLM. Then run the ``sitecustomize`` this one shadows, if there is one."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

from deskside.engine.cpu import install

install()

# Python imports only the first `sitecustomize` on sys.path: run the next one too, so that
# a system or virtual-environment hook keeps working in vLLM's processes.
_here = os.path.dirname(os.path.realpath(__file__))
_rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None and _spec.origin != __file__:
    _shadowed = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_shadowed)
