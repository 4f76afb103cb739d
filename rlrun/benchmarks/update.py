"""Update throughput: rlrun's losses + ``OptimizerStep`` against hand-written steps.

* SAC at HalfCheetah shapes (obs 17, action 6, 256x256 ReLU, batch 256):
  rlrun's ``SACLoss`` + ``OptimizerStep(loss.param_groups())`` +
  ``loss.update_targets()`` + the divergence check (as a run wires them) against a
  CleanRL-like step: two ``nn.Sequential`` Q nets, three Adams (critic, actor,
  temperature), three backward passes, polyak with ``torch._foreach_lerp_``.
* PPO epoch at CartPole shapes (obs 4, 2 actions, 64x64 tanh, 2048 samples,
  minibatches of 64, Adam eps 1e-5, grad-norm clip 0.5): rlrun's ``PPOLoss`` +
  ``OptimizerStep`` on ``batch[idx]`` against a CleanRL-like minibatch step.

Both sides read the same pre-made batches (replay sampling is not timed); the
hand-written sides use torch's default Adam (the per-tensor loop on CPU). Ratios
are rlrun's throughput over the reference's. These rows measure against a floor or a
baseline timed in the same process (each also with the opt-in ``optim.impl=fused``):

* SAC update against its GEMM floor: every matmul of one update (forward and
  backward, each layer, both critics, at the update's shapes; ``sac_gemms``) run
  back to back with ``torch.mm`` into preallocated outputs. Its rate is the most
  updates/s any implementation of this update could reach on this core with this
  BLAS; rlrun's fraction of it is the overhead left (element-wise ops, Adam,
  autograd, Python).
* The eager ceiling against the same floor: the floor's matmuls plus only the element-wise ops
  no eager implementation avoids (``eager_ceiling``: ReLU forward and backward, bias sums, one
  fused Adam call, polyak), with no autograd, loss arithmetic or Python bookkeeping: an upper
  bound on the fraction of the floor any eager SAC update can reach here.
* PPO minibatch step against the pre-#27 construction (``impl=for_loop``: torch's
  per-tensor Adam loop, which was the CPU default), in ms per minibatch.

``--compile`` adds rlrun's steps with ``compile=true`` (``rlrun.trainer.compiled``) against the
same steps eager: ms per update of each, the speedup, the compile time (the first calls,
excluded from the timings) and the updates it takes the speedup to repay it.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable

import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor, nn
from torch.distributions import Categorical, Normal

from rlrun.algos.ppo import PPOLoss
from rlrun.algos.sac import SACLoss
from rlrun.benchmarks.common import interleave, median, ratio, table
from rlrun.core.specs import EnvSpec
from rlrun.modules.models import actor_critic, actor_twin_q
from rlrun.trainer.builtins import DivergenceGuard
from rlrun.trainer.compiled import CompiledUpdate
from rlrun.trainer.optim import OptimizerStep

OBS, ACT, BATCH, POOL = 17, 6, 256, 16


def sac_batches(seed: int = 0) -> list[TensorDict]:
    """``POOL`` random replay batches in rlrun's key layout."""
    g = torch.Generator().manual_seed(seed)
    return [TensorDict({
        "observation": torch.randn(BATCH, OBS, generator=g),
        "action": torch.rand(BATCH, ACT, generator=g) * 2 - 1,
        "next": {"observation": torch.randn(BATCH, OBS, generator=g),
                 "reward": torch.randn(BATCH, 1, generator=g),
                 "terminated": torch.rand(BATCH, 1, generator=g) < 0.01},
    }, batch_size=[BATCH]) for _ in range(POOL)]


def rlrun_sac(batches: list[TensorDict], check: bool = True, impl: str = "auto", compiled: bool = False
              ) -> Callable[[int], None]:
    """rlrun's SAC update, wired as a run wires it (``check=False``: no divergence check;
    ``impl``: ``optim.impl``; ``compiled``: as ``compile=true`` wires it)."""
    spec = EnvSpec((OBS,), np.dtype(np.float32), False, ACT)
    loss = SACLoss(actor_twin_q(spec), spec, gamma=0.99)
    optim = OptimizerStep(loss.param_groups(), "adam", lr=3e-4, eps=1e-8, weight_decay=0.0, impl=impl)
    guard, trainer = _guard(loss, optim)
    update = CompiledUpdate(loss, optim) if compiled else None

    def steps(n: int) -> None:
        for i in range(n):
            losses = loss(batches[i % POOL]) if update is None else update.loss(batches[i % POOL])
            if check:
                guard.post_loss(trainer, None, losses)
            (optim if update is None else update).step(losses)
            loss.update_targets()
        if check:
            guard.post_steps(trainer)  # once per collected batch in a run
    return steps


def sac_gemms(batch: int = BATCH) -> list[tuple[int, int, int]]:
    """``(m, k, n)`` of every matmul of one SAC update (``SACLoss`` + one backward), in order.

    Forward: the actor on next_obs (no grad) and on obs; each critic on (next_obs,
    next_action) (target), (obs, action) and (obs, new_action). Backward: the TD
    loss gives each critic layer ``dW = X^T dY`` and, above the first layer (its
    input needs no grad), ``dX = dY W^T``; the actor loss reaches the actor through
    the frozen critics (``dX`` at every critic layer, no ``dW``); the actor gets ``dW``
    everywhere and ``dX`` above its first layer.
    """
    actor = [(OBS, 256), (256, 256), (256, 2 * ACT)]
    critic = [(OBS + ACT, 256), (256, 256), (256, 1)]
    fwd = lambda layers: [(batch, i, o) for i, o in layers]  # noqa: E731
    d_w = lambda layers: [(i, batch, o) for i, o in layers]  # noqa: E731
    d_x = lambda layers: [(batch, o, i) for i, o in layers]  # noqa: E731
    shapes = fwd(actor) + 2 * fwd(critic) + 2 * fwd(critic) + fwd(actor) + 2 * fwd(critic)
    shapes += 2 * (d_x(critic[:0:-1]) + d_w(critic[::-1]))  # TD loss, both critics
    shapes += 2 * d_x(critic[::-1])  # actor loss through the frozen critics
    shapes += d_x(actor[:0:-1]) + d_w(actor[::-1])
    return shapes


def gemm_floor(shapes: list[tuple[int, int, int]]) -> Callable[[int], None]:
    """``n`` repetitions of ``torch.mm`` over ``shapes`` on preallocated float32 tensors."""
    g = torch.Generator().manual_seed(0)
    ops = [(torch.randn(m, k, generator=g), torch.randn(k, n, generator=g), torch.empty(m, n))
           for m, k, n in shapes]

    def steps(n: int) -> None:
        for _ in range(n):
            for a, b, out in ops:
                torch.mm(a, b, out=out)
    return steps


def eager_ceiling(batch: int = BATCH) -> tuple[Callable[[int], None], list[tuple[int, int, int]]]:
    """The most an eager SAC update at these shapes could reach: ``sac_gemms``' matmuls (the
    forward ones as ``addmm`` with the bias) and, on preallocated tensors, only the element-wise
    work no eager implementation avoids: ReLU and its backward between layers, the bias
    gradients' sums, one fused Adam call over all 19 parameters and the polyak ``lerp``.

    Left out, so the ceiling is an upper bound: the loss's own arithmetic (the tanh-Gaussian
    sample and log-probability, the twin minimum, the TD target, the squared errors), autograd
    and any Python around the ops. Returns the steps and the ``(m, k, n)`` of its matmuls in
    order (``sac_gemms``'s, which tests/benchmarks checks).
    """
    g = torch.Generator().manual_seed(0)
    ops: list[Callable[[], object]] = []
    shapes: list[tuple[int, int, int]] = []

    def layers(sizes: list[int]) -> list[tuple[Tensor, Tensor]]:
        return [(torch.randn(i, o, generator=g) * 0.05, torch.zeros(o)) for i, o in zip(sizes, sizes[1:])]

    actor = layers([OBS, 256, 256, 2 * ACT])
    critics = [layers([OBS + ACT, 256, 256, 1]) for _ in range(2)]

    def forward(net: list[tuple[Tensor, Tensor]]) -> list[Tensor]:
        h = torch.randn(batch, net[0][0].shape[0], generator=g)
        outs = [h]
        for j, (w, b) in enumerate(net):
            out = torch.empty(batch, w.shape[1])
            ops.append(lambda b=b, h=h, w=w, out=out: torch.addmm(b, h, w, out=out))
            shapes.append((batch, w.shape[0], w.shape[1]))
            if j < len(net) - 1:
                ops.append(out.relu_)
            outs.append(out)
            h = out
        return outs  # the input, then each layer's output

    def backward(net: list[tuple[Tensor, Tensor]], acts: list[Tensor], dw: bool, first_dx: bool) -> None:
        dy = torch.randn(batch, net[-1][0].shape[1], generator=g)
        inputs = acts[:-1]  # each layer's input
        for j in range(len(net) - 1, -1, -1):
            w, _ = net[j]
            if dw:
                dw_out, db_out = torch.empty_like(w), torch.empty(w.shape[1])
                ops.append(lambda x=inputs[j], dy=dy, o=dw_out: torch.mm(x.t(), dy, out=o))
                shapes.append((w.shape[0], batch, w.shape[1]))
                ops.append(lambda dy=dy, o=db_out: torch.sum(dy, 0, out=o))
            if j > 0 or first_dx:
                dx = torch.empty(batch, w.shape[0])
                ops.append(lambda dy=dy, w=w, o=dx: torch.mm(dy, w.t(), out=o))
                shapes.append((batch, w.shape[1], w.shape[0]))
                if j > 0:  # through the ReLU below: autograd's own op for it
                    ops.append(lambda dx=dx, y=inputs[j]: torch.ops.aten.threshold_backward(dx, y, 0))
                dy = dx

    # forward in sac_gemms' order: actor on next_obs, critics on the target, on (obs, action),
    # actor on obs, critics on (obs, new_action)
    forward(actor)
    for _ in range(2):
        forward(critics[0]), forward(critics[1])
    actor_acts = forward(actor)
    critic_acts = [forward(critics[0]), forward(critics[1])]
    for q, acts in zip(critics, critic_acts):  # TD loss: dW everywhere, dX above the first layer
        backward(q, acts, dw=True, first_dx=False)
    for q, acts in zip(critics, critic_acts):  # actor loss through the frozen critics: dX only
        backward(q, acts, dw=False, first_dx=True)
    backward(actor, actor_acts, dw=True, first_dx=False)
    params = [t for net in [actor, *critics] for layer in net for t in layer] + [torch.zeros(1)]
    grads, moments = [torch.randn_like(p) for p in params], [torch.zeros_like(p) for p in params]
    second, counts = [torch.zeros_like(p) for p in params], [torch.tensor(1.0) for _ in params]
    targets = [t.clone() for net in critics for layer in net for t in layer]
    sources = [t for net in critics for layer in net for t in layer]
    ops.append(lambda: torch._fused_adam_(params, grads, moments, second, [], counts, lr=3e-4, beta1=0.9,
                                          beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False,
                                          maximize=False))
    ops.append(lambda: torch._foreach_lerp_(targets, sources, 0.005))

    def steps(n: int) -> None:
        for _ in range(n):
            for op in ops:
                op()
    return steps, shapes


def _guard(loss: nn.Module, optim: OptimizerStep) -> tuple[DivergenceGuard, object]:
    """The divergence check as every run wires it: flags per step, one sync per batch."""
    trainer = type("Trainer", (), {"optimizer": optim, "frames": 0, "diverge": lambda self, what: None})()
    return DivergenceGuard(loss), trainer


def _mlp(sizes: list[int], act: type[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers += [nn.Linear(a, b)] + ([act()] if i < len(sizes) - 2 else [])
    return nn.Sequential(*layers)


def handwritten_sac(batches: list[TensorDict], gamma: float = 0.99, tau: float = 0.005
                    ) -> Callable[[int], None]:
    """A CleanRL-like SAC update (critic, then actor, then temperature)."""
    actor = _mlp([OBS, 256, 256, 2 * ACT], nn.ReLU)
    q1, q2 = _mlp([OBS + ACT, 256, 256, 1], nn.ReLU), _mlp([OBS + ACT, 256, 256, 1], nn.ReLU)
    q1_t, q2_t = copy.deepcopy(q1), copy.deepcopy(q2)
    q_params, t_params = [*q1.parameters(), *q2.parameters()], [*q1_t.parameters(), *q2_t.parameters()]
    log_alpha = torch.zeros(1, requires_grad=True)
    q_opt, a_opt = torch.optim.Adam(q_params, lr=3e-4), torch.optim.Adam(actor.parameters(), lr=3e-4)
    alpha_opt = torch.optim.Adam([log_alpha], lr=3e-4)
    data = [(b["observation"], b["action"], b["next", "reward"].squeeze(-1),
             b["next", "observation"], b["next", "terminated"].squeeze(-1).float()) for b in batches]

    def sample(obs: Tensor) -> tuple[Tensor, Tensor]:
        mean, log_std = actor(obs).chunk(2, -1)
        normal = Normal(mean, log_std.clamp(-5, 2).exp())
        u = normal.rsample()
        correction = 2 * (math.log(2) - u - nn.functional.softplus(-2 * u))
        return torch.tanh(u), (normal.log_prob(u) - correction).sum(-1)

    def step(obs: Tensor, act: Tensor, rew: Tensor, next_obs: Tensor, term: Tensor) -> None:
        alpha = log_alpha.detach().exp()
        with torch.no_grad():
            next_act, next_logp = sample(next_obs)
            x = torch.cat([next_obs, next_act], -1)
            next_q = torch.min(q1_t(x), q2_t(x)).squeeze(-1) - alpha * next_logp
            target = rew + gamma * (1 - term) * next_q
        x = torch.cat([obs, act], -1)
        q_loss = 0.5 * ((q1(x).squeeze(-1) - target).pow(2).mean()
                        + (q2(x).squeeze(-1) - target).pow(2).mean())
        q_opt.zero_grad()
        q_loss.backward()
        q_opt.step()
        pi, logp = sample(obs)
        x = torch.cat([obs, pi], -1)
        actor_loss = (alpha * logp - torch.min(q1(x), q2(x)).squeeze(-1)).mean()
        a_opt.zero_grad()
        actor_loss.backward()
        a_opt.step()
        alpha_loss = -(log_alpha * (logp.detach() - ACT)).mean()
        alpha_opt.zero_grad()
        alpha_loss.backward()
        alpha_opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(t_params, q_params, tau)

    def steps(n: int) -> None:
        for i in range(n):
            step(*data[i % POOL])
    return steps


def ppo_data(n: int = 2048, seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict({
        "observation": torch.randn(n, 4, generator=g),
        "action": torch.randint(2, (n,), generator=g),
        "sample_log_prob": math.log(0.5) + 0.05 * torch.randn(n, generator=g),
        "advantage": torch.randn(n, generator=g), "value_target": torch.randn(n, generator=g),
    }, batch_size=[n])


def rlrun_ppo(batch: TensorDict, minibatch: int = 64, impl: str = "auto", compiled: bool = False
              ) -> Callable[[int], None]:
    """rlrun's PPO epochs: ``PPOLoss`` + ``OptimizerStep`` on shuffled minibatches.

    ``impl`` is ``optim.impl``: ``for_loop`` is the construction before #27; ``compiled``: as
    ``compile=true`` wires them.
    """
    spec = EnvSpec((4,), np.dtype(np.float32), True, 2)
    loss = PPOLoss(actor_critic(spec, hidden=[64, 64], activation="tanh"))
    optim = OptimizerStep(loss.param_groups(), "adam", lr=3e-4, max_grad_norm=0.5, eps=1e-5,
                          weight_decay=0.0, impl=impl)
    guard, trainer = _guard(loss, optim)
    update = CompiledUpdate(loss, optim) if compiled else None

    def epochs(n: int) -> None:
        for _ in range(n):
            for idx in torch.randperm(batch.shape[0]).split(minibatch):
                losses = loss(batch[idx]) if update is None else update.loss(batch[idx])
                guard.post_loss(trainer, None, losses)
                (optim if update is None else update).step(losses)
        guard.post_steps(trainer)
    return epochs


def handwritten_ppo(batch: TensorDict, minibatch: int = 64) -> Callable[[int], None]:
    """CleanRL-like PPO epochs (Categorical actor, V critic, one Adam, clip 0.5)."""
    actor, critic = _mlp([4, 64, 64, 2], nn.Tanh), _mlp([4, 64, 64, 1], nn.Tanh)
    params = [*actor.parameters(), *critic.parameters()]
    opt = torch.optim.Adam(params, lr=3e-4, eps=1e-5)
    obs, act, old_logp, adv_all, ret = (batch[k] for k in ("observation", "action", "sample_log_prob",
                                                           "advantage", "value_target"))

    def epochs(n: int) -> None:
        for _ in range(n):
            for idx in torch.randperm(obs.shape[0]).split(minibatch):
                dist = Categorical(logits=actor(obs[idx]))
                logratio = dist.log_prob(act[idx]) - old_logp[idx]
                ratio_ = logratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio_ - 1) - logratio).mean()  # noqa: F841 (logged in CleanRL)
                    clipfrac = ((ratio_ - 1).abs() > 0.2).float().mean()  # noqa: F841
                adv = adv_all[idx]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg_loss = torch.max(-adv * ratio_, -adv * ratio_.clamp(0.8, 1.2)).mean()
                v_loss = 0.5 * (critic(obs[idx]).squeeze(-1) - ret[idx]).pow(2).mean()
                loss = pg_loss - 0.0 * dist.entropy().mean() + 0.5 * v_loss
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(params, 0.5)
                opt.step()
    return epochs


def compile_rows(quick: bool, reps: int) -> list[dict]:
    """ms/update of rlrun's SAC update and PPO minibatch step, eager and compiled (``compile=true``)."""
    batches, ppo_batch = sac_batches(), ppo_data()
    minibatches = ppo_batch.shape[0] // 64
    rows = []
    for name, per_call, n, make in (
            ("SAC update (HalfCheetah shapes)", 1, 20 if quick else 100,
             lambda c: rlrun_sac(batches, compiled=c)),
            ("PPO minibatch (CartPole shapes, 64 samples)", minibatches, 1 if quick else 3,
             lambda c: rlrun_ppo(ppo_batch, compiled=c))):
        eager, compiled = make(False), make(True)
        start = time.perf_counter()
        compiled(2 if per_call == 1 else 1)  # compiles (the optimiser step again on its second call)
        compile_s = time.perf_counter() - start
        eager(2 if per_call == 1 else 1)
        times = interleave({"eager": lambda n=n, f=eager: f(n), "compiled": lambda n=n, f=compiled: f(n)},
                           reps)
        ms = {k: 1e3 * median(v) / (n * per_call) for k, v in times.items()}
        gain = ms["eager"] - ms["compiled"]
        rows.append({"workload": name, "eager_ms": ms["eager"], "compiled_ms": ms["compiled"],
                     "speedup": ms["eager"] / ms["compiled"], "compile_s": compile_s,
                     "break_even_updates": math.ceil(1e3 * compile_s / gain) if gain > 0 else None,
                     "times_s": times})
        print(f"  update --compile {name}: {ms['eager']:.2f} -> {ms['compiled']:.2f} ms/update, "
              f"compile {compile_s:.1f} s", flush=True)
    return rows


def run(quick: bool = False, reps: int | None = None, compile: bool = False) -> dict:
    """SAC updates/s and PPO epochs/s of rlrun against the hand-written steps, the SAC GEMM
    floor and the PPO step of the pre-#27 optimiser construction (``compile``: and rlrun's steps
    compiled against eager)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    reps = reps or (3 if quick else 7)
    sac_n, ppo_n = (20, 1) if quick else (100, 3)
    batches, ppo_batch = sac_batches(), ppo_data()
    rows = []
    # compile=true's SAC update against the floor in the same process (issue 27's target: 0.75);
    # interleave's untimed warm-up call compiles it
    compiled = ((("SAC update, compile=true / its GEMM floor", "updates/s", sac_n,
                  rlrun_sac(batches, compiled=True), gemm_floor(sac_gemms()), "torch.mm floor"),)
                if compile else ())
    for name, unit, n, rl, ref, ref_name in (
            *compiled,
            ("SAC update (HalfCheetah shapes)", "updates/s", sac_n, rlrun_sac(batches),
             handwritten_sac(batches), "hand-written"),
            ("SAC update / its GEMM floor", "updates/s", sac_n, rlrun_sac(batches),
             gemm_floor(sac_gemms()), "torch.mm floor"),
            # what eager execution could reach at best: the floor's GEMMs plus the element-wise
            # ops no eager update avoids (eager_ceiling), against the floor
            ("SAC eager ceiling / its GEMM floor", "updates/s", sac_n, eager_ceiling()[0],
             gemm_floor(sac_gemms()), "torch.mm floor"),
            ("PPO epoch (CartPole shapes, 32 minibatches)", "epochs/s", ppo_n, rlrun_ppo(ppo_batch),
             handwritten_ppo(ppo_batch), "hand-written"),
            ("PPO minibatch step vs pre-#27 construction", "epochs/s", ppo_n, rlrun_ppo(ppo_batch),
             rlrun_ppo(ppo_batch, impl="for_loop"), "optim.impl=for_loop"),
            # the opt-in fused CPU Adam (last-bit rounding differs) against the default
            ("SAC update, optim.impl=fused / its GEMM floor", "updates/s", sac_n,
             rlrun_sac(batches, impl="fused"), gemm_floor(sac_gemms()), "torch.mm floor"),
            ("PPO minibatch step, optim.impl=fused vs pre-#27", "epochs/s", ppo_n,
             rlrun_ppo(ppo_batch, impl="fused"), rlrun_ppo(ppo_batch, impl="for_loop"),
             "optim.impl=for_loop"),
            # the divergence check's own cost: rlrun with it over rlrun without it
            ("SAC update, divergence check on / off", "updates/s", sac_n, rlrun_sac(batches),
             rlrun_sac(batches, check=False), "check off")):
        times = interleave({"rlrun": lambda rl=rl, n=n: rl(n), "hand": lambda ref=ref, n=n: ref(n)},
                           reps)
        r = ratio(times["hand"], times["rlrun"])
        row = {"workload": name, "unit": unit, "per_rep": n, "reps": reps, "reference": ref_name,
               "rlrun_per_s": n / median(times["rlrun"]), "hand_per_s": n / median(times["hand"]),
               "ratio": r["median"], "ratio_min": r["min"], "ratio_max": r["max"], "times_s": times}
        if unit == "epochs/s":  # 2048 samples in minibatches of 64: 32 steps an epoch
            row["rlrun_ms_per_step"] = 1e3 * median(times["rlrun"]) / (32 * n)
            row["ref_ms_per_step"] = 1e3 * median(times["hand"]) / (32 * n)
        rows.append(row)
        print(f"  update {name}: ratio {r['median']:.2f}", flush=True)
    return {"rows": rows, "notes": [], "compile": compile_rows(quick, reps) if compile else []}


def render(result: dict) -> str:
    """The result as a Markdown table."""
    cols = [("workload", "workload", "s"), ("unit", "unit", "s"), ("reference", "reference", "s"),
            ("rlrun_per_s", "rlrun", ".1f"), ("hand_per_s", "reference", ".1f"),
            ("ratio", "rlrun/reference", ".2f"), ("ratio_min", "min", ".2f"), ("ratio_max", "max", ".2f"),
            ("rlrun_ms_per_step", "rlrun ms/step", ".3f"), ("ref_ms_per_step", "reference ms/step", ".3f")]
    out = table(result["rows"], cols)
    if result.get("compile"):
        rows = [{**r, "break_even": "never" if r["break_even_updates"] is None else r["break_even_updates"]}
                for r in result["compile"]]
        out += "\n\ncompile=true against eager (compile time excluded from ms/update):\n\n" + table(rows, [
            ("workload", "workload", "s"), ("eager_ms", "eager ms/update", ".3f"),
            ("compiled_ms", "compiled ms/update", ".3f"), ("speedup", "speedup", ".2f"),
            ("compile_s", "compile s", ".1f"), ("break_even", "break-even updates", "")])
    return out
