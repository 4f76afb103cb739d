"""Keeps ``import tensordict`` from importing ``torch._dynamo`` (~2.4 s on an idle machine).

This pays off where no torch optimizer is made: errors raised while building, and
using a trained policy. A training run still imports ``torch._dynamo`` when it makes
its optimizer (``torch.optim`` goes through ``torch._disable_dynamo``, which imports it).

tensordict 0.15 calls ``torch.compiler.allow_in_graph`` and
``torch.compiler.assume_constant_result`` on a few of its functions at import time, and
both import ``torch._dynamo``. While tensordict's module body runs, this hook swaps them
for deferred versions:

* ``assume_constant_result(fn)`` only sets ``fn._dynamo_marked_constant``, which is all
  Dynamo's own version does, so it is applied at once;
* ``allow_in_graph(fn)`` is queued, and applied with the real function as soon as
  ``torch._dynamo`` is imported (by ``torch.compile`` or anything else), before any
  compilation can trace tensordict.

The originals are restored when tensordict's import ends. ``install()`` adds an import
hook and imports nothing; it does nothing when tensordict or ``torch._dynamo`` is
already imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from typing import Any

_pending: list[Callable] = []


def _wrap_exec(spec: importlib.machinery.ModuleSpec, before: Callable[[], Any],
               after: Callable[[Any], None]) -> importlib.machinery.ModuleSpec:
    loader = spec.loader
    exec_module = loader.exec_module  # type: ignore[union-attr]

    def exec_with_hooks(module) -> None:
        state = before()
        try:
            exec_module(module)
        finally:
            after(state)

    loader.exec_module = exec_with_hooks  # type: ignore[union-attr]
    return spec


class _Hook(importlib.abc.MetaPathFinder):
    """Finds ``tensordict`` (defer) and ``torch._dynamo`` (apply what was deferred) like the
    next finders would, and wraps their execution."""

    def find_spec(self, name: str, path=None, target=None):
        if name not in ("tensordict", "torch._dynamo"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        if name == "tensordict":
            return _wrap_exec(spec, _defer, _restore)
        return _wrap_exec(spec, lambda: None, lambda _: _apply_pending())


def _defer() -> tuple[Callable, Callable]:
    import torch.compiler as compiler

    originals = compiler.allow_in_graph, compiler.assume_constant_result

    def allow_in_graph(fn):
        if "torch._dynamo" in sys.modules:
            return originals[0](fn)
        _pending.append(fn)
        return fn

    def assume_constant_result(fn):
        if "torch._dynamo" in sys.modules:
            return originals[1](fn)
        fn._dynamo_marked_constant = True
        return fn

    compiler.allow_in_graph, compiler.assume_constant_result = allow_in_graph, assume_constant_result
    return originals


def _restore(originals: tuple[Callable, Callable]) -> None:
    import torch.compiler as compiler

    compiler.allow_in_graph, compiler.assume_constant_result = originals


def _apply_pending() -> None:
    import torch.compiler

    while _pending:
        torch.compiler.allow_in_graph(_pending.pop())
    _uninstall()


def _uninstall() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Hook)]


def install() -> None:
    """Adds the import hook (once), unless tensordict or ``torch._dynamo`` is already imported."""
    if "tensordict" in sys.modules or "torch._dynamo" in sys.modules:
        return
    if not any(isinstance(f, _Hook) for f in sys.meta_path):
        sys.meta_path.insert(0, _Hook())
