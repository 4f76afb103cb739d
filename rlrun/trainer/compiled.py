"""``compile=true``: the loss's forward and backward and the optimiser steps under ``torch.compile``.

The loss module is wrapped by ``torch.compile`` (its backward is compiled with it, by
AOTAutograd). The optimiser groups that step together run in one compiled call
(``step_each``), or, for plain Adams on CPU, in torch's fused Adam kernel; each group's own
compiled ``step`` serves where step hooks are registered. Gradient clipping, the hooks and
everything else stay eager. On CPU inductor compiles with this module's graph passes and its
C++ wrapper (``_cpu_options``). On CUDA the loss runs with
``mode="reduce-overhead"`` (CUDA graphs); elsewhere ``mode="default"``. The wrapped loss shares
its parameters with ``trainer.loss``, so checkpoints, target updates and ``post_loss`` hooks
see the same module and the same losses as without compilation.

A compile failure (anything dynamo or inductor raises, in the forward, the backward or an
optimiser step) never ends a run: that part falls back to eager for the rest of it, with one
line on stderr naming the loss and the reason. The call that failed is redone eagerly; if the
eager call raises too, its error is the loss's own and propagates.

When it pays on CPU (``python -m rlrun.benchmarks update --compile``; 2 shared cores,
``threads=1``, torch 2.13, g++ 12, figures in rlrun/benchmarks/README.md): with gcc's loop
vectoriser left on for inductor's kernels (``let_gcc_vectorise_loops``), SAC's 256x256 update
ran 1.11-1.15x faster compiled (0.82x with inductor's own flags) and PPO's 64x64 minibatch step
1.2x; a cold compile took 47 s (SAC) and 15 s (PPO), repaid after ~30,000 and ~45,000 updates.
So on CPU it pays for long runs (a 1M-frame SAC run makes ~1M updates), not for short ones or
tests; ``compile: false`` stays the default because compiled runs draw their random numbers from
inductor's generator: reproducible per seed, but not the eager runs' streams, so turning it on
is the user's choice, not a silent change of every fixed-seed result.
``torch._dynamo`` is imported only when this module compiles something (``rlrun.core.private.torch``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from rlrun.core.private.torch import let_gcc_vectorise_loops  # inductor's gcc flags (a private name)
from rlrun.trainer.optim import (
    _can_step_together,
    _undecorated_step,
    adam_together,
    mark_stepped,
    needs_own_step,
)


def compile_mode(device: torch.device | str) -> str:
    """``reduce-overhead`` (CUDA graphs) on CUDA, ``default`` elsewhere."""
    return "reduce-overhead" if torch.device(device).type == "cuda" else "default"


def inductor_compile(fn: Callable, mode: str = "default") -> Callable:
    """``torch.compile(fn, mode=mode)``; on ``default`` (CPU) with ``_cpu_options``: two graph
    passes of this module and a C++ wrapper without the Python-side asserts (this compile only)."""
    if mode != "default":
        return torch.compile(fn, mode=mode)
    return torch.compile(fn, options=_cpu_options())


def _cpu_options() -> dict[str, Any]:
    """Inductor options of a CPU compile.

    * ``recompute_relu_masks`` on the joint graph (``joint_custom_post_pass``) and
      ``unfuse_bias_adds`` on each graph after partitioning (``post_grad_custom_post_pass``).
    * ``cpp_wrapper``: each compiled graph's calling code (allocations, GEMM calls, kernel
      launches) is C++, not a Python function: SAC's forward and backward wrappers took ~0.5 ms of
      Python per update. Without the asserts (``size_asserts`` and the others) that wrapper would
      repeat, per call, on the inputs whose sizes and strides dynamo's guards have checked already.
      Measured in one process (31 interleaved timings of 10 SAC updates, load 2.4): 0.656 of the
      GEMM floor without both, 0.692 with both. A cold compile of SAC (empty inductor cache, one
      try each on the loaded machine) took 31 s with them and 54 s without: no dearer to build.
    """
    from torch._inductor.custom_graph_pass import CustomGraphPass  # imported when compiling only

    class Pass(CustomGraphPass):
        def __init__(self, fn: Callable[[torch.fx.Graph], int]):
            self.fn = fn

        def __call__(self, graph: torch.fx.Graph) -> None:
            self.fn(graph)

        def uuid(self) -> str:  # inductor's caches key on it: a change of the pass needs a new one
            return f"rlrun.{self.fn.__name__}.1"

    return {"joint_custom_post_pass": Pass(recompute_relu_masks),
            "post_grad_custom_post_pass": Pass(unfuse_bias_adds),
            "cpp_wrapper": True, "size_asserts": False, "alignment_asserts": False, "scalar_asserts": False}


def recompute_relu_masks(graph: torch.fx.Graph) -> int:
    """Marks each ReLU backward mask ``relu(x) <= 0`` to be recomputed in the backward from the saved
    float ``relu(x)``, not saved from the forward as a ``bool`` tensor; returns how many it marked.

    Why: where the forward keeps no float ReLU output for the backward (SAC's actor loss through
    the frozen critics needs no weight gradients, only the masks), AOTAutograd's min-cut saves the
    mask, a quarter of the float's bytes. Inductor's CPU kernels then load it with ATen's
    ``VecMask<float,1>::from(const bool*)``, a scalar loop with a select per element that is slow
    on a ReLU's random mask: 0.9 ms per 131,072 elements, 1.5 ms of a compiled SAC update
    (rlrun/benchmarks/README.md), while comparing a saved float is a vectorised load and compare.
    The mask's values are the same either way; the forward saves the float instead of writing
    the mask.
    """
    from torch.utils.checkpoint import CheckpointPolicy

    aten, marked = torch.ops.aten, 0
    for node in graph.nodes:
        if (node.target is aten.le.Scalar and node.args[1] == 0
                and getattr(node.args[0], "target", None) is aten.relu.default):
            node.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE  # read by the partitioner
            marked += 1
    return marked


def step_each(steps: list[tuple[Callable, torch.optim.Optimizer]]) -> None:
    """Each ``(step, optimiser)``'s ``step(optimiser)``: ``step`` is the class's own body, without
    torch's wrappers (profiling label and hooks, ``_use_grad``'s grad switch and graph breaks);
    the caller turns grad off and checks for hooks."""
    for step, opt in steps:
        step(opt)


def unfuse_bias_adds(graph: torch.fx.Graph) -> int:
    """Rewrites ``addmm(b, x, w)`` / ``baddbmm(b, x, w)`` whose every use is element-wise (a ReLU)
    as ``mm(x, w) + b`` / ``bmm(x, w) + b``, so that inductor adds the bias in the kernel of that
    element-wise op; returns how many it rewrote.

    Why: on CPU inductor calls ATen's ``addmm``/``baddbmm``, which first copies the broadcast bias
    into the whole output (then multiplies with beta=1): 15 such copies were 0.6-1.0 ms of a
    compiled SAC update. Inductor does this rewrite itself on GPUs only
    (``should_prefer_unfused_addmm``). The sum is the same but for rounding: the bias is added
    after the products rather than before (compiled kernels do not promise eager's bits anyway).
    """
    from torch._inductor.utils import is_pointwise_use

    aten, rewritten = torch.ops.aten, 0
    plain = {aten.addmm.default: aten.mm.default, aten.baddbmm.default: aten.bmm.default}
    for node in list(graph.nodes):
        mm = plain.get(node.target)
        if (mm is None or len(node.args) != 3 or any(node.kwargs.get(k, 1) != 1 for k in ("alpha", "beta"))
                or not node.users or not all(is_pointwise_use(use) for use in node.users)):
            continue
        bias, x, w = node.args
        with graph.inserting_before(node):
            product = graph.call_function(mm, (x, w))
            out = graph.call_function(aten.add.Tensor, (product, bias))
        val = node.meta.get("val")
        if val is not None:  # the fake values later passes read (inductor's updater would add them)
            with val.fake_mode:
                product.meta["val"] = mm(x.meta["val"], w.meta["val"])
                out.meta["val"] = aten.add.Tensor(product.meta["val"], bias.meta["val"])
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        rewritten += 1
    return rewritten


def _reason(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {lines[0] if lines else '(no message)'}"
    return text if len(text) <= 200 else text[:197] + "..."


class CompiledUpdate:
    """The compiled loss call and optimiser step the trainer's loop uses when ``compile=true``.

    Args:
        loss: The loss module (left as it is; a compiled wrapper shares its parameters).
        optimizer: The ``OptimizerStep``; each group's ``step`` is replaced by a guarded compiled one.
        mode: ``torch.compile`` mode (None: ``compile_mode`` of the loss's device).
        compiler: ``torch.compile`` or a stand-in with its signature (tests).
        warn: Where fallback lines go (default: stderr).
        fused_adam: Step plain CPU Adams with torch's fused kernel, not a compiled step (None:
            when compiling with inductor for CPU, ``mode="default"``).
    """

    def __init__(self, loss: nn.Module, optimizer: Any, mode: str | None = None,
                 compiler: Callable | None = None, warn: Callable[[str], None] | None = None,
                 fused_adam: bool | None = None):
        real = compiler is None
        first = next(loss.parameters(), None)
        if compiler is None:
            import torch._dynamo  # here only: compile=false runs never pay for it (rlrun.core.private.torch)

            # Each group's optimiser is its own instance of one ``step`` code object, compiled
            # twice (its first steps create its state): past the limit dynamo would run it eager.
            config = torch._dynamo.config
            config.recompile_limit = max(config.recompile_limit, 2 * len(optimizer.optimizers) + 8)
            let_gcc_vectorise_loops()
            # this module's passes and options are for inductor's CPU code (the optimiser steps of
            # a CUDA loss compile with mode="default" too, as torch.compile alone)
            on_cpu = first is None or first.device.type == "cpu"
            compiler = inductor_compile if on_cpu else torch.compile
        if mode is None:
            mode = compile_mode(first.device if first is not None else "cpu")
        self.eager_loss, self.optimizer, self.mode = loss, optimizer, mode
        self.name = type(loss).__name__
        self._warn = warn or (lambda line: print(line, file=sys.stderr, flush=True))
        self._graphs = mode == "reduce-overhead"
        self._loss: Callable | None = compiler(loss, mode=mode)
        self._sub: Any = None
        self._stepped = 0
        self.fallbacks: list[str] = []  # what fell back to eager, with the reason
        self._step_fns: dict[str, dict[str, Callable]] = {}
        for group, opt in optimizer.optimizers.items():
            # CUDA graphs need capturable optimisers; the steps compile with the default mode
            opt.step = self._guard_step(group, opt.step, compiler(opt.step, mode="default"))
        # Every stepping group in one compiled region (the per-group steps above serve where it
        # declines: step hooks, a differentiable optimiser). Why: torch's ``step`` wrappers break
        # the graph (``_use_grad``'s graph breaks), so each group's compiled step was two dynamo
        # regions, each with its guard checks: six per SAC update.
        self._together: Callable | None = compiler(step_each, mode="default")
        # Plain CPU Adams step with torch's fused kernel instead (no region, no guards): one ATen call
        # vectorised over every tensor, 0.34 ms against 0.62 ms for the compiled region of SAC's
        # three (measured in one process, 9 interleaved timings of 50 steps). Its rounding is not the
        # eager foreach step's, as the compiled step's is not either.
        if fused_adam is None:
            fused_adam = real and mode == "default"
        self._fused = fused_adam and _can_step_together(list(optimizer.optimizers.values()), fused=True)
        self._groups = {id(opt): group for group, opt in optimizer.optimizers.items()}
        optimizer.step_together = self._step_together

    def _fall_back(self, what: str, exc: BaseException) -> None:
        self.fallbacks.append(f"{what}: {_reason(exc)}")
        self._warn(f"[rlrun] compile=true: {self.name} {what} runs eager from now on "
                   f"(compile failed: {_reason(exc)})")

    def _step_together(self, opts: list[torch.optim.Optimizer]) -> bool:
        """``step_each(opts)`` compiled, without grad; False (nothing done) where a group's own
        ``step`` must run: step hooks or a differentiable optimiser (their wrappers run those)."""
        if self._together is None or any(needs_own_step(o) for o in opts):
            return False
        self._stepped += 1
        if self._fused and adam_together(opts, fused=True):
            return True
        try:
            with torch.no_grad():  # outside the region: dynamo then traces an inference graph
                self._together([(_undecorated_step(type(o)), o) for o in opts])
        except Exception as exc:  # compilation happens before any parameter is written
            self._together = None
            for state in self._step_fns.values():  # the same compiler: no group tries it again
                state["fn"] = state["eager"]
            self._fall_back(f"optimiser step ({'+'.join(self._groups[id(o)] for o in opts)})", exc)
            return False
        for opt in opts:
            mark_stepped(opt)
        return True

    def _guard_step(self, group: str, eager: Callable, compiled: Callable) -> Callable:
        state = self._step_fns[group] = {"fn": compiled, "eager": eager}

        def step(*args: Any, **kwargs: Any) -> Any:
            self._stepped += 1
            if state["fn"] is eager:
                return eager(*args, **kwargs)
            try:
                return compiled(*args, **kwargs)
            except Exception as exc:  # compilation happens before any parameter is written
                state["fn"] = eager
                self._fall_back(f"optimiser step ({group})", exc)
                return eager(*args, **kwargs)
        return step

    def loss(self, sub: Any) -> dict[str, Tensor]:
        """The losses of ``sub``, computed by the compiled module (eagerly after a failure)."""
        self._sub = sub
        if self._loss is None:
            return self.eager_loss(sub)
        try:
            if self._graphs:
                torch.compiler.cudagraph_mark_step_begin()
            losses = self._loss(sub)
        except Exception as exc:
            self._loss = None
            self._fall_back("loss", exc)
            return self.eager_loss(sub)
        if self._graphs:  # a CUDA graph's outputs are overwritten by its next replay; hooks may keep them
            losses = {k: v.clone() if isinstance(v, Tensor) else v for k, v in losses.items()}
        return losses

    def step(self, losses: dict[str, Tensor]) -> None:
        """``optimizer.step(losses)``; a backward that fails to compile is redone eagerly."""
        self._stepped = 0
        try:
            self.optimizer.step(losses)
        except Exception as exc:
            # optimiser-step failures are handled per group: this one came from the backward,
            # before any parameter moved (else it is the eager code's own error)
            if self._loss is None or self._stepped:
                raise
            self._loss = None
            self._fall_back("loss", exc)
            self.optimizer.step(self.eager_loss(self._sub))
