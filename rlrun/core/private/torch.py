"""torch's private names, in one place, each behind a guard (``say_once``: on a torch where a name
moved, rlrun takes the public path, says so in one line, and never fails).

1. **tensordict's import without ``torch._dynamo``** (``install``, on ``import rlrun``):
   tensordict calls ``torch.compiler.allow_in_graph``/``assume_constant_result`` on a few of its
   functions at import time, and both import ``torch._dynamo``. While tensordict's module body
   runs they are swapped for deferred versions: ``assume_constant_result(fn)`` only sets the
   private marker ``fn._dynamo_marked_constant`` (all Dynamo's own version does); ``allow_in_graph``
   is queued and applied with the real function as soon as ``torch._dynamo`` is imported, before
   anything can be compiled. Public path: tensordict imported as it is.
2. **torch.optim's methods without ``torch._dynamo``** (``optimizers_without_dynamo``):
   ``add_param_group``, ``zero_grad``, ``state_dict``, ``load_state_dict`` are wrapped by
   ``torch._disable_dynamo`` (recognised by its code living in the private ``torch._compile``),
   whose first call imports ``torch._dynamo``. Outside a compilation that wrapper only calls the
   function, so until Dynamo is imported its private cache ``fn.__dynamo_disable`` is pre-filled
   with the function itself; the import hook empties it as ``torch._dynamo`` is imported. Public
   path: torch's wrapper as it is.
3. **The optimiser step without torch's wrapper** (``own_step_allowed``, ``mark_stepped``,
   used by ``rlrun.trainer.optim``): torch's ``Optimizer.step`` wrapper imports ``torch._dynamo``
   on first use; rlrun steps with the class's own ``step`` under ``no_grad`` and does the rest
   of the wrapper's work itself, which needs the private hook lists
   (``opt._optimizer_step_pre_hooks``/``_post_hooks``, ``torch.optim.optimizer.
   _global_optimizer_pre_hooks``/``_post_hooks``: any hook registered -> torch's own step) and the
   profiler marker ``opt._optimizer_step_code``. Public path: ``opt.step()``.
4. **Inductor's gcc flags** (``let_gcc_vectorise_loops``, ``compile=true`` on CPU only): drops
   ``-fno-tree-loop-vectorize`` from the private ``torch._inductor.cpp_builder.
   _get_optimization_cflags``. Public path: inductor's flags.
5. **oneDNN's linear on plain tensors** (``onednn_linear``, ``gemm: onednn|auto`` only, used by
   ``rlrun.modules.onednn``): ``torch.ops.mkldnn._linear_pointwise``, the kernel inductor's CPU
   backend calls; torch's public float32 products on CPU go to MKL, whose AVX-512 kernels take
   the slow path on AMD. Public path: the BLAS (``gemm: blas``, the default).

Figures for (1)-(3) (``rlrun total_frames=1024 progress=false logger=csv``, whole process, 5
interleaved paired runs on this project's shared 2-core machine at load ~15, 2026-12-05, CPU
seconds, median): all three 1.84 s; without (1) alone 5.29 s, without (2) alone 5.28 s, without
(3) alone 5.19 s, without any 5.14 s. Each one alone keeps ``torch._dynamo`` out of the process
(any one missing imports it, ~3.4 s of CPU), so each buys the whole gap. (4) is a run-time
figure: a gcc-built mask-store loop over 131,072 floats took 2.0-2.2 ms with inductor's flags,
0.2 ms without the one flag; compiled SAC's update 19-22 ms -> 13-15 ms
(rlrun/benchmarks/README.md). (5): one 256x256x256 float32 product on one AMD EPYC thread, MKL
298-311 us, oneDNN 138-153 us; SAC's Pendulum update 0.74x the CPU time on a quiet machine.
"""

from __future__ import annotations

import functools
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


def _defer() -> tuple[Callable, Callable] | None:
    import torch.compiler as compiler

    if not all(callable(getattr(compiler, n, None)) for n in ("allow_in_graph", "assume_constant_result")):
        say_once("torch.compiler", "torch.compiler lacks allow_in_graph or assume_constant_result",
                 "tensordict's import runs as it is (it may import torch._dynamo: about 2.4 s)")
        return None
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


def _restore(originals: tuple[Callable, Callable] | None) -> None:
    import torch.compiler as compiler

    if originals is None:
        return
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
    try:
        import torch._compile
    except ImportError as err:
        say_once("torch._compile", f"{err}", "torch.optim imports torch._dynamo at the first optimiser "
                 "(about 1.7 s more start-up)")
        return None
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


_SAID: set[str] = set()


def say_once(name: str, why: str, public: str) -> None:
    """One line on stderr, once per private ``name``: it moved, and what rlrun does instead."""
    if name in _SAID:
        return
    _SAID.add(name)
    import torch

    print(f"rlrun: note: torch {torch.__version__}: {why}; {public}", file=sys.stderr, flush=True)


def own_step_allowed(opt: Any) -> bool:
    """Whether rlrun may step ``opt`` itself (3): no step hook registered on it or globally, not a
    differentiable optimiser, and this torch still has the private names the step needs."""
    module = _optimizer_module()
    try:
        hooks = (opt._optimizer_step_pre_hooks or opt._optimizer_step_post_hooks
                 or module._global_optimizer_pre_hooks or module._global_optimizer_post_hooks)
        opt._optimizer_step_code  # noqa: B018 -- the marker mark_stepped calls
    except AttributeError as err:
        say_once("optimizer hooks", f"{err}", "optimiser steps run through torch's own Optimizer.step "
                 "(which imports torch._dynamo: about 1.7 s more start-up)")
        return False
    return not (opt.defaults.get("differentiable") or hooks)


def _optimizer_module() -> Any:
    """``torch.optim.optimizer`` (imported with the optimiser: a dict lookup, each step)."""
    return sys.modules["torch.optim.optimizer"]


def mark_stepped(opt: Any) -> None:
    """What torch's step wrapper does after a step besides hooks: the marker profilers read (only
    called where ``own_step_allowed``)."""
    opt._optimizer_step_code()


def let_gcc_vectorise_loops() -> bool:
    """Drops the ``-fno-tree-loop-vectorize`` that inductor adds to every gcc build of its CPU kernels (4).

    Why: inductor's vectorised kernels store comparison masks (ReLU's backward mask ``x <= 0``,
    clamps, ``isfinite``) through ATen's ``VecMask::store(bool*)``, whose converting loops are
    written for gcc's loop vectoriser to vectorise; with it off they run scalar. Only the code
    generated for loops changes: inductor's flags still forbid reassociating or contracting float
    arithmetic (``-fno-unsafe-math-optimizations``, ``-ffp-contract=off``), so kernels compute the
    same values. Clang builds never had the flag. Returns False (changing nothing, said once)
    where torch's builder no longer has this private function; the wrapper keeps the original as
    ``__wrapped__``.
    """
    try:
        from torch._inductor import cpp_builder
    except ImportError as err:
        say_once("cpp_builder", f"{err}", "inductor's gcc flags are kept (its mask stores run scalar)")
        return False
    original = getattr(cpp_builder, "_get_optimization_cflags", None)
    if original is None:
        say_once("cpp_builder", "torch._inductor.cpp_builder has no _get_optimization_cflags",
                 "inductor's gcc flags are kept (its mask stores run scalar)")
        return False
    if getattr(original, "__module__", None) == __name__:  # wrapped already
        return True

    def optimization_cflags(*args: Any, **kwargs: Any) -> Any:
        cflags, ldflags = original(*args, **kwargs)
        return [f for f in cflags if f != "fno-tree-loop-vectorize"], ldflags

    optimization_cflags.__wrapped__ = original  # type: ignore[attr-defined]
    cpp_builder._get_optimization_cflags = optimization_cflags
    return True


@functools.cache
def onednn_linear() -> Callable | None:
    """torch's oneDNN linear ``(x, w, b, "none", [], "")`` -> ``x @ w.T + b`` (5), or None where
    this torch lacks it (said once: the products stay on the BLAS)."""
    import torch

    if not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._linear_pointwise.default
    except (AttributeError, RuntimeError) as err:
        say_once("mkldnn", f"no torch.ops.mkldnn._linear_pointwise ({err})", "gemm=onednn uses the BLAS")
        return None
