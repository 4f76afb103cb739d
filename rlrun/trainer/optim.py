"""The optimisation step: one optimiser per parameter group of the loss.

Every ``loss_*`` entry of the loss dict is summed and back-propagated once;
each group's optimiser then steps if its parameters received gradients. A loss
that omits a term on some steps (TD3's delayed actor) thus leaves that group's
optimiser untouched, with no special case here.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import Tensor, nn

from rlrun.core.errors import ConfigError, did_you_mean
from rlrun.core.private.torch import mark_stepped, optimizers_without_dynamo, own_step_allowed
from rlrun.core.registry import Fraction, NonNegativeFloat, NonNegativeInt, PositiveFloat, register
from rlrun.distributed.sync import average_gradients
from rlrun.trainer.lamb import Lamb

OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "lamb": Lamb,
              "rmsprop": torch.optim.RMSprop, "sgd": torch.optim.SGD}
Impl = Literal["auto", "fused", "foreach", "for_loop"]


def build_torch_optimizer(name: str, params: list[nn.Parameter], impl: Impl = "auto",
                          **opts: Any) -> torch.optim.Optimizer:
    """One torch optimiser over ``params`` with the chosen kernel implementation.

    ``auto`` picks, per device, the fastest implementation that keeps fixed-seed runs'
    arithmetic: ``foreach`` on CPU (torch's CPU default is the per-tensor loop; foreach
    does the same float operations in multi-tensor kernels, bit-identical, measured
    1.0-1.15x faster per Adam step at rlrun's sizes) and ``fused`` on CUDA (one kernel
    for all tensors, torch's documented fastest; its CUDA default is foreach). ``fused``
    on CPU is faster still (Adam step ~3.5x, SAC update ~1.07x, PPO minibatch step
    ~1.15x) but rounds differently in the last bit, which changes every fixed-seed
    fingerprint, so it is opt-in: ``optim.impl=fused``. An implementation the optimiser
    lacks falls back: fused -> foreach -> the per-tensor loop (``lamb`` has none).
    """
    cls = OPTIMIZERS[name]
    accepts = inspect.signature(cls).parameters
    device = params[0].device.type if params else "cpu"
    if impl == "auto":
        impl = "fused" if device == "cuda" else "foreach"
    if impl == "fused" and "fused" in accepts:
        opts["fused"] = True
    elif impl in ("fused", "foreach") and "foreach" in accepts:
        opts["foreach"] = True
    elif impl == "for_loop" and "foreach" in accepts:
        opts["foreach"] = False
    return cls(params, **opts)


class OptimizerStep:
    """Steps one optimiser per parameter group.

    Args:
        param_groups: ``{group: parameters}`` from the loss.
        optimizer: ``adam``, ``adamw``, ``lamb``, ``rmsprop`` or ``sgd``.
        lr: Learning rate of every group unless overridden in ``groups``.
        max_grad_norm: Clip each group's gradient norm (None: no clipping).
        groups: Per-group overrides, e.g. ``{"critic": {"lr": 1e-3}}``.
        lr_schedule: ``constant``, ``linear`` (to 0 at the end of training) or ``warmup``
            (DT: ``lr * min(1, (updates + 1) / warmup_steps)``, then constant).
        warmup_steps: Updates of the linear warm-up (``warmup`` only).
        kwargs: Passed to the optimiser (``eps``, ``weight_decay``, ``alpha``, ...).
    """

    def __init__(self, param_groups: dict[str, list[nn.Parameter]], optimizer: str = "adam",
                 lr: float = 3e-4, max_grad_norm: float | None = None,
                 groups: dict[str, dict] | None = None, lr_schedule: str = "constant",
                 warmup_steps: int = 0, **kwargs: Any):
        if optimizer not in OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {optimizer!r}.{did_you_mean(optimizer, OPTIMIZERS)}",
                              key="optim.optimizer", fix=f"use one of {', '.join(OPTIMIZERS)}")
        if lr_schedule not in ("constant", "linear", "warmup"):
            raise ConfigError(f"unknown lr_schedule {lr_schedule!r}", key="optim.lr_schedule",
                              fix="use constant, linear or warmup")
        if lr_schedule == "warmup" and warmup_steps < 1:
            raise ConfigError(f"lr_schedule=warmup needs warmup_steps >= 1, got {warmup_steps}",
                              key="optim.warmup_steps", fix="e.g. optim.warmup_steps=10000")
        self.warmup_steps, self.updates = int(warmup_steps), 0
        groups = dict(groups or {})
        for name in groups:
            if name not in param_groups:
                raise ConfigError(f"the loss has no parameter group {name!r}",
                                  key=f"optim.groups.{name}",
                                  fix=f"groups are: {', '.join(param_groups)}")
        self.max_grad_norm, self.lr_schedule = max_grad_norm, lr_schedule
        self.params = {g: [p for p in ps if p.requires_grad] for g, ps in param_groups.items()}
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        optimizers_without_dynamo()
        for g, ps in self.params.items():
            opts = {"lr": lr, **kwargs, **groups.get(g, {})}
            gclip = opts.pop("max_grad_norm", max_grad_norm)
            self.optimizers[g] = build_torch_optimizer(optimizer, ps, **opts)
            self.optimizers[g].max_grad_norm = gclip  # per-group clip, kept beside the optimizer
        self.base_lrs = {g: [pg["lr"] for pg in o.param_groups] for g, o in self.optimizers.items()}
        self._adam_together = _can_step_together(list(self.optimizers.values()))
        # one optimiser (PPO, A2C, IMPALA): its Adam steps on flat buffers (``FlatAdam``)
        self._flat = None
        if len(self.optimizers) == 1:
            ((group, only),) = self.optimizers.items()
            self._flat = FlatAdam(group, only) if FlatAdam.fits(only) else None
        self._params = [p for o in self.optimizers.values() for pg in o.param_groups for p in pg["params"]]
        self.last_grad_norms: dict[str, Tensor] = {}
        # set by compile=true (rlrun.trainer.compiled): steps the optimisers it is given in one call,
        # or returns False having done nothing (each then steps itself)
        self.step_together: Callable[[list[torch.optim.Optimizer]], bool] | None = None
        self.progress = 0.0  # of the training budget, fed by ``anneal``
        self._apply_schedule()

    def lr_factor(self) -> float:
        """The one LR schedule: the factor on each group's base rate now.

        ``linear``: ``1 - progress`` (progress fed once per batch by ``anneal``); ``warmup``:
        LambdaLR's warm-up as the DT reference sets it, ``min(1, (updates + 1) / warmup_steps)``.
        """
        if self.lr_schedule == "linear":
            return max(1.0 - self.progress, 0.0)
        if self.lr_schedule == "warmup":
            return min(1.0, (self.updates + 1) / self.warmup_steps)
        return 1.0

    def _apply_schedule(self) -> None:
        if self.lr_schedule == "constant":
            return  # the rates stay the config's
        factor = self.lr_factor()
        for g, opt in self.optimizers.items():
            for pg, base in zip(opt.param_groups, self.base_lrs[g]):
                pg["lr"] = base * factor

    def step(self, losses: dict[str, Tensor]) -> None:
        total = sum(v for k, v in losses.items() if k.startswith("loss_"))
        # zero_grad(set_to_none=True) without its wrapping (torch._disable_dynamo's, ~20 us an optimiser);
        # FlatAdam's params are its one group's, so the same list serves both
        for p in self._params:
            p.grad = None
        total.backward()
        average_gradients(self._params)  # data-parallel (issue 39): one all-reduce; nothing alone
        if self._flat is not None and self._flat.step():
            if self._flat.norm is not None:
                self.last_grad_norms[self._flat.group] = self._flat.norm
            self._after_step()
            return
        stepping = []
        for g, opt in self.optimizers.items():
            params = self.params[g]
            if all(p.grad is None for p in params):
                continue
            if opt.max_grad_norm is not None:
                # returns a tensor: logged later without a host sync here
                self.last_grad_norms[g] = nn.utils.clip_grad_norm_(params, opt.max_grad_norm)
            stepping.append(opt)
        if not ((self.step_together is not None and stepping and self.step_together(stepping))
                or (self._adam_together and adam_together(stepping))):
            for opt in stepping:
                step_without_dynamo(opt)
        self._after_step()

    def _after_step(self) -> None:
        self.updates += 1
        if self.lr_schedule == "warmup" and self.updates <= self.warmup_steps:
            self._apply_schedule()  # per update until the warm-up ends; constant after

    def anneal(self, progress: float) -> None:
        """Feeds training progress in [0, 1] to the schedule (the ``linear`` one follows it)."""
        self.progress = progress
        if self.lr_schedule == "linear":
            self._apply_schedule()

    def state_dict(self) -> dict:
        state = {g: o.state_dict() for g, o in self.optimizers.items()}
        if self.lr_schedule == "warmup":  # the schedule's position (other schedules follow the clock)
            state["_updates"] = self.updates
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restores moments and step counts; hyperparameters (lr, eps, ...) stay the config's.

        torch's ``load_state_dict`` would also bring back the saved learning rate, so a
        resumed run could not change it; the caller re-applies the schedule (``anneal``).
        """
        for g, o in self.optimizers.items():
            hyper = [{k: v for k, v in pg.items() if k != "params"} for pg in o.param_groups]
            o.load_state_dict(state[g])
            for pg, h in zip(o.param_groups, hyper):
                pg.update(h)
        self.updates = int(state.get("_updates", 0))
        self._apply_schedule()


def _plain_adam(opt: torch.optim.Optimizer) -> bool:
    """A torch Adam of one group whose step is its multi-tensor (foreach) or fused arithmetic alone:
    no weight decay, amsgrad, maximize, capturable or differentiable, float hyperparameters, dense
    CPU float32 parameters. ``adam_together`` and ``FlatAdam`` reproduce exactly that step."""
    if type(opt) is not torch.optim.Adam or len(opt.param_groups) != 1:
        return False
    pg = opt.param_groups[0]
    return ((pg["foreach"] is True or pg["fused"] is True) and pg["weight_decay"] == 0
            and not (pg["amsgrad"] or pg["maximize"] or pg["capturable"] or pg["differentiable"])
            and not any(isinstance(v, Tensor) for v in (*pg["betas"], pg["lr"], pg["eps"]))
            and len(pg["params"]) > 0
            and all(p.device.type == "cpu" and p.dtype == torch.float32 and p.layout == torch.strided
                    for p in pg["params"]))


def _can_step_together(opts: list[torch.optim.Optimizer], fused: bool | None = None) -> bool:
    """Whether ``adam_together`` computes exactly what each optimiser's own ``step`` would: plain
    Adams (``_plain_adam``), all foreach or all fused, sharing betas and eps (foreach: the
    learning rates may differ; fused takes one). ``fused=True``: whether it can step them all
    with torch's fused kernel (one optimiser will do; their own implementations may differ)."""
    if len(opts) < (1 if fused else 2) or not all(_plain_adam(o) for o in opts):
        return False
    first = opts[0].param_groups[0]
    return all((fused or pg["fused"] == first["fused"]) and pg["betas"] == first["betas"]
               and pg["eps"] == first["eps"] for pg in (o.param_groups[0] for o in opts))


@torch.no_grad()
def adam_together(opts: list[torch.optim.Optimizer], fused: bool | None = None) -> bool:
    """One multi-tensor Adam step over several optimisers' parameters; False (nothing done)
    where each must step itself.

    torch's foreach Adam runs, per optimiser, a few multi-tensor ops whose CPU kernels loop
    over the tensors one by one; issuing those ops once over all groups' tensors does the
    same float operations on every tensor (the same bits, checked by
    tests/trainer/test_optim_together.py) and saves each optimiser's Python step: SAC's
    three (critic, actor, temperature) cost more than their arithmetic at its sizes.
    Optimisers must pass ``_can_step_together``; this checks what can change after that (a
    ``step`` set on an instance, as ``compile=true`` sets its compiled one, or step hooks).

    ``fused=True`` (``compile=true``, whose steps never kept eager's bits): torch's fused CPU
    kernel, whatever the optimisers' own implementation, in place of their compiled steps
    (``_can_step_together(opts, fused=True)``).
    """
    if len(opts) < (1 if fused else 2) or torch.compiler.is_compiling():
        return False
    params, grads, lrs = [], [], []
    for opt in opts:
        if (not fused and "step" in vars(opt)) or needs_own_step(opt):
            return False
        group = opt.param_groups[0]
        own = [p for p in group["params"] if p.grad is not None]
        if len(own) != len(group["params"]) or any(p.grad.is_sparse for p in own):
            return False  # torch steps only the parameters with gradients: let it
        params += own
        grads += [p.grad for p in own]
        lrs += [group["lr"]] * len(own)
    beta1, beta2 = opts[0].param_groups[0]["betas"]
    eps, fused = opts[0].param_groups[0]["eps"], fused or opts[0].param_groups[0]["fused"]
    if fused and any(lr != lrs[0] for lr in lrs):
        return False  # torch's fused kernel takes one learning rate
    exp_avgs, exp_avg_sqs, steps = [], [], []
    for opt in opts:
        for p in opt.param_groups[0]["params"]:
            state = opt.state[p]
            if len(state) == 0:  # as torch's Adam._init_group (not capturable)
                if fused:
                    state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                else:
                    dtype = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
                    state["step"] = torch.tensor(0.0, dtype=dtype)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            steps.append(state["step"])
    with torch.autograd.profiler.record_function("OptimizerStep.adam_together"):
        if fused:  # torch.optim.adam._fused_adam's step, one kernel call for all tensors
            torch._foreach_add_(steps, 1)
            torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False, lr=lrs[0],
                               beta1=beta1, beta2=beta2, weight_decay=0.0, eps=eps, maximize=False,
                               grad_scale=None, found_inf=None)
        else:  # torch.optim.adam._multi_tensor_adam's CPU path (capturable=False, no weight decay)
            torch._foreach_add_(steps, torch.tensor(1.0, device="cpu"), alpha=1.0)
            counts = [s.item() for s in steps]
            _adam_update(params, grads, exp_avgs, exp_avg_sqs, counts, lrs, beta1, beta2, eps)
    for opt in opts:
        mark_stepped(opt)
    return True


def _adam_update(params: list[Tensor], grads: list[Tensor], exp_avgs: list[Tensor],
                 exp_avg_sqs: list[Tensor], counts: list[float], lrs: list[float],
                 beta1: float, beta2: float, eps: float) -> None:
    """torch.optim.adam._multi_tensor_adam's CPU path after its step count (capturable=False, no
    weight decay), op for op; ``counts`` are the tensors' step counts after this step."""
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
    step_size = [(lr / (1 - beta1 ** n)) * -1 for lr, n in zip(lrs, counts)]
    bias_correction2_sqrt = [(1 - beta2 ** n) ** 0.5 for n in counts]
    denom = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denom, bias_correction2_sqrt)
    torch._foreach_add_(denom, eps)
    torch._foreach_addcdiv_(params, exp_avgs, denom, step_size)


class FlatAdam:
    """One torch ``foreach`` Adam's step (with its group's gradient-norm clip) on flat buffers.

    torch's CPU ``foreach`` kernels loop over the tensors one by one, so a step of PPO's 12
    small tensors is ~300 op dispatches (clip ~100), which cost far more than the arithmetic.
    Here the moments and step counts live in one flat buffer each (the optimiser's state holds
    views of them, so its ``state_dict``, torch's own ``step`` and checkpoints see the usual
    per-parameter tensors); gradients and parameters are gathered into flat buffers, Adam runs
    as one op per line of torch's ``_multi_tensor_adam`` on them, and the parameters are copied
    back. Each element goes through the same float operations as in torch's per-tensor kernels,
    so the weights are bit-identical (``tests/trainer/test_optim_flat.py``); a step measured
    ~0.3 ms against ~0.8 ms (clip + Adam, 2-core machine).

    ``step`` returns False (nothing done) where torch must step itself: a parameter without a
    gradient, a step hook or compiled ``step``, or state that is not this one's (after a load,
    until ``relink``).
    """

    def __init__(self, group: str, opt: torch.optim.Optimizer):
        self.group, self.opt = group, opt
        self.params: list[Tensor] = list(opt.param_groups[0]["params"])
        self.sizes = [p.numel() for p in self.params]
        self.clip: float | None = getattr(opt, "max_grad_norm", None)
        self.norm: Tensor | None = None  # the last step's total gradient norm (when it clips)
        self._first: Tensor | None = None  # the first parameter's exp_avg view while linked
        self.off = False  # the parameters' step counts differ: torch steps them

    @staticmethod
    def fits(opt: torch.optim.Optimizer) -> bool:
        """A plain foreach (not fused) Adam (``_plain_adam``): the step ``FlatAdam`` reproduces exactly."""
        pg = opt.param_groups[0] if _plain_adam(opt) else {}
        return pg.get("foreach") is True and not pg.get("fused")

    def relink(self) -> bool:
        """Puts the optimiser's state (fresh, or loaded) into flat buffers of which it then holds
        views; False where the per-parameter step counts differ (torch then steps itself)."""
        state = self.opt.state
        params = self.params
        if any(len(state[p]) and set(state[p]) != {"step", "exp_avg", "exp_avg_sq"} for p in params):
            self.off = True
            return False
        steps = {float(state[p]["step"]) for p in params if len(state[p])}
        if len(steps) > 1 or (steps and any(len(state[p]) == 0 for p in params)):
            self.off = True  # one bias correction no longer fits every parameter: torch's step from now on
            return False
        dtype = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
        total = sum(self.sizes)
        self.flat_p, self.flat_g = torch.empty(total), torch.empty(total)
        self.exp_avg, self.exp_avg_sq = torch.zeros(total), torch.zeros(total)
        self.steps = torch.full((len(params),), steps.pop() if steps else 0.0, dtype=dtype)
        self.p_views, self.g_views = self._views(self.flat_p), self._views(self.flat_g)
        for i, (p, m, v) in enumerate(zip(params, self._views(self.exp_avg), self._views(self.exp_avg_sq))):
            if len(state[p]):
                m.copy_(state[p]["exp_avg"])
                v.copy_(state[p]["exp_avg_sq"])
            state[p] = {"step": self.steps[i], "exp_avg": m, "exp_avg_sq": v}  # views: one state
        self._first = state[params[0]]["exp_avg"]
        return True

    def _views(self, flat: Tensor) -> list[Tensor]:
        return [t.view_as(p) for t, p in zip(flat.split(self.sizes), self.params)]

    @torch.no_grad()
    def step(self) -> bool:
        """Clips (if the group does) and steps; False where torch must step instead."""
        opt, params = self.opt, self.params
        if self.off:
            return False
        if ("step" in vars(opt) or needs_own_step(opt) or torch.compiler.is_compiling()
                or any(p.grad is None for p in params)):
            # torch steps: where it skips a parameter without a gradient, the step counts part,
            # which the next step's relink finds
            self._first = None
            return False
        state0 = opt.state.get(params[0])  # torch's load_state_dict replaces the state: link it again
        linked = self._first is not None and state0 is not None and state0.get("exp_avg") is self._first
        if not (linked or self.relink()):
            return False
        grads = [p.grad for p in params]
        if any(g.is_sparse for g in grads):
            return False
        flat_g = self.flat_g
        torch.cat([g.reshape(-1) for g in grads], out=flat_g)
        if self.clip is not None:  # nn.utils.clip_grad_norm_'s arithmetic on the same elements
            norms = torch._foreach_norm(self.g_views, 2.0)
            self.norm = torch.linalg.vector_norm(torch.stack(norms), 2.0)
            flat_g.mul_(torch.clamp(self.clip / (self.norm + 1e-6), max=1.0))
        else:
            self.norm = None
        pg = opt.param_groups[0]
        beta1, beta2 = pg["betas"]
        torch.cat([p.reshape(-1) for p in params], out=self.flat_p)
        self.steps.add_(1.0)  # every parameter's count (views of one tensor), all equal
        _adam_update([self.flat_p], [flat_g], [self.exp_avg], [self.exp_avg_sq], [self.steps[0].item()],
                     [pg["lr"]], beta1, beta2, pg["eps"])  # .item() of a CPU tensor: no device sync
        torch._foreach_copy_(params, self.p_views)
        mark_stepped(opt)
        return True


def needs_own_step(opt: torch.optim.Optimizer) -> bool:
    """Whether only ``opt``'s own (wrapped) ``step`` computes what it should: a differentiable
    optimiser, or step hooks registered on it or globally (torch's wrapper runs those), or a torch
    without the private names rlrun's step needs (``rlrun.core.private.torch``)."""
    return not own_step_allowed(opt)


def step_without_dynamo(opt: torch.optim.Optimizer) -> None:
    """``opt.step()``, without the import of ``torch._dynamo`` (1.7 s) that torch's wrapper of every
    ``step`` makes (``_use_grad_for_differentiable``) when Dynamo is not imported yet.

    Outside a compilation that wrapper only turns gradients off (``differentiable=False``) around
    the optimiser's own ``step``, and ``Optimizer.profile_hook_step`` adds its profiler label, hooks
    and ``_optimizer_step_code``: this does the same, so the weights are bit-identical
    (tests/trainer/test_optim_eager.py). With Dynamo imported, a differentiable optimiser or step
    hooks registered, or a ``step`` set on the instance (``compile=true`` compiles it there), that
    ``step`` runs.
    """
    if "torch._dynamo" in sys.modules or "step" in vars(opt) or needs_own_step(opt):
        opt.step()
        return
    label = f"Optimizer.step#{type(opt).__name__}.step"
    with torch.autograd.profiler.record_function(label), torch.no_grad():
        _undecorated_step(type(opt))(opt)
        mark_stepped(opt)


def _undecorated_step(cls: type) -> Any:
    """The class's own ``step``, without torch's profiling and grad-mode wrappers (cached per class)."""
    step = _STEPS.get(cls)
    if step is None:
        step = _STEPS[cls] = inspect.unwrap(cls.step)
    return step


_STEPS: dict[type, Any] = {}


def make_optimizer(param_groups: dict, registered_as: str = "adam", lr: PositiveFloat = 3e-4,
                   max_grad_norm: PositiveFloat | None = None, groups: dict | None = None,
                   lr_schedule: Literal["constant", "linear", "warmup"] = "constant",
                   eps: PositiveFloat = 1e-8,
                   weight_decay: NonNegativeFloat = 0.0, alpha: Fraction | None = None,
                   warmup_steps: NonNegativeInt = 0, impl: Impl = "auto") -> OptimizerStep:
    """One optimiser per loss parameter group, with grad clipping and an optional linear LR schedule.

    Registered as ``adam``, ``adamw``, ``lamb``, ``rmsprop`` and ``sgd``: ``optim=rmsprop``
    (or ``optim.name=rmsprop``) picks the optimiser; the options are shared. ``impl`` picks
    torch's kernels (see ``build_torch_optimizer``).
    """
    kwargs: dict[str, Any] = {"weight_decay": weight_decay, "impl": impl}
    if registered_as != "sgd":
        kwargs["eps"] = eps
    if alpha is not None:
        kwargs["alpha"] = alpha
    return OptimizerStep(param_groups, registered_as, lr, max_grad_norm, groups, lr_schedule, warmup_steps,
                         **kwargs)


for _name in OPTIMIZERS:
    register("optim", _name)(make_optimizer)
