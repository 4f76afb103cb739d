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

``optimizers_without_dynamo()`` does the same for ``torch.optim.Optimizer``'s
``add_param_group``, ``zero_grad``, ``state_dict`` and ``load_state_dict``: torch wraps
them in ``torch._disable_dynamo``, whose first call imports ``torch._dynamo`` (1.7 s of
a 1,024-frame run) to wrap them in ``torch._dynamo.disable``. Outside a compilation
that wrapper only calls the function, so until ``torch._dynamo`` is imported the
wrapper's cache (``fn.__dynamo_disable``) is pre-filled with the function itself; the
import hook empties it as ``torch._dynamo`` is imported, before anything can be
compiled, and torch's own wrapping applies from then on. (``step`` imports
``torch._dynamo`` without that cache: ``rlrun.trainer.optim`` steps without it.)
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from typing import Any

_pending: list[Callable] = []
_prefilled: list[Callable] = []  # torch functions whose ``__dynamo_disable`` this module set
_OPTIMIZER_METHODS = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")


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
        return _wrap_exec(spec, _unfill, lambda _: _apply_pending())


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


def _add_hook() -> None:
    if not any(isinstance(f, _Hook) for f in sys.meta_path):
        sys.meta_path.insert(0, _Hook())


def install() -> None:
    """Adds the import hook (once), unless tensordict or ``torch._dynamo`` is already imported."""
    if "tensordict" in sys.modules or "torch._dynamo" in sys.modules:
        return
    _add_hook()


def _disable_dynamo_target(method: Callable) -> Callable | None:
    """The function that ``torch._disable_dynamo`` wrapped into ``method``, else None."""
    import torch._compile

    fn = getattr(method, "__wrapped__", None)
    code = getattr(method, "__code__", None)
    if fn is None or code is None or code.co_filename != torch._compile.__file__ or code.co_name != "inner":
        return None
    return fn


def optimizers_without_dynamo() -> None:
    """Lets ``torch.optim.Optimizer``'s ``torch._disable_dynamo`` methods run without importing
    ``torch._dynamo`` while it is not imported (see the module docstring); idempotent."""
    if "torch._dynamo" in sys.modules or _prefilled:
        return
    import torch

    for name in _OPTIMIZER_METHODS:
        fn = _disable_dynamo_target(getattr(torch.optim.Optimizer, name))
        if fn is not None and getattr(fn, "__dynamo_disable", None) is None:
            fn.__dynamo_disable = fn  # what the wrapper calls instead of torch._dynamo.disable(fn)
            _prefilled.append(fn)
    _add_hook()


def _unfill() -> None:
    """Torch's own ``torch._dynamo.disable`` wrapping returns, before Dynamo can compile."""
    while _prefilled:
        fn = _prefilled.pop()
        if fn.__dict__.get("__dynamo_disable") is fn:
            del fn.__dynamo_disable
