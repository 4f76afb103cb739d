"""GAE: rlrun's ``gae()`` on the paper's Table 4 workload against reference loops.

The workload is 1000 trajectories x 1000 steps (float32), with episode ends
(``done``) at frequency 0.001 spread at random; half of them are terminations,
the others truncations. References, each on the layout it is written for:

* ``numpy``: Stable-Baselines3's reverse loop over time, vectorised over
  trajectories, on time-major ``[T, N]`` arrays (SB3's rollout buffer layout).
* ``numpy+T``: the same loop given rlrun's ``[N, T]`` arrays, so it first
  copies them to time-major (the layout-fair comparison).
* ``torch``: the same reverse loop in plain torch on rlrun's ``[N, T]`` tensors
  (column ``[:, t]`` at each step).
* ``numba``: a ``@njit`` double loop on ``[N, T]`` arrays, timed after compilation
  (numba is one of rlrun's dependencies).

``rlrun`` is ``gae()`` as the trainer calls it (its numba kernel when numba is
installed, one thread as ``threads: 1`` sets); ``rlrun[torch]`` forces its
fallback torch backend, for a machine without numba or tensors not on the CPU.

Ratios are ``reference_time / rlrun_time``: above 1, rlrun is faster.

**small batches** (``small_rows``): per call, ``gae``'s numpy path with the
kernel's exact rounding against the kernel itself, at the batch sizes of short
runs (``envs x T``, ``x agents`` for groups): what a process saves by not
loading numba (~1 s) is spent here at every call, which sets ``SMALL`` and
``NUMPY_BUDGET_S`` in ``rlrun.objectives.gae``.
"""

from __future__ import annotations

import functools
import importlib.util
import time
from collections.abc import Callable

import numpy as np
import torch

from rlrun.benchmarks.common import interleave, median, ratio, table
from rlrun.objectives.gae import gae, warm_up

GAMMA, LMBDA = 0.99, 0.95


def make_data(n: int, t: int, done_freq: float = 1e-3, seed: int = 0) -> dict[str, np.ndarray]:
    """Random ``[n, t]`` rewards, values and episode ends (float32 / bool)."""
    rng = np.random.default_rng(seed)
    done = rng.random((n, t)) < done_freq
    return {
        "reward": rng.standard_normal((n, t), np.float32),
        "value": rng.standard_normal((n, t), np.float32),
        "next_value": rng.standard_normal((n, t), np.float32),
        "terminated": done & (rng.random((n, t)) < 0.5),
        "done": done,
    }


def gae_numpy(reward, value, next_value, terminated, done, gamma: float, lmbda: float):
    """SB3-style reverse loop over time on ``[T, N]`` arrays (vectorised over N)."""
    not_term = 1.0 - terminated.astype(reward.dtype)
    not_done = 1.0 - done.astype(reward.dtype)
    adv = np.empty_like(reward)
    last = np.zeros_like(reward[0])
    for t in reversed(range(reward.shape[0])):
        delta = reward[t] + gamma * next_value[t] * not_term[t] - value[t]
        last = delta + gamma * lmbda * not_done[t] * last
        adv[t] = last
    return adv, adv + value


def gae_torch(reward, value, next_value, terminated, done, gamma: float, lmbda: float):
    """Plain torch reverse loop over time on ``[N, T]`` tensors."""
    delta = reward + gamma * next_value * (~terminated).to(reward.dtype) - value
    coef = gamma * lmbda * (~done).to(reward.dtype)
    adv = torch.empty_like(reward)
    last = torch.zeros_like(reward[:, 0])
    for t in range(reward.shape[-1] - 1, -1, -1):
        last = delta[:, t] + coef[:, t] * last
        adv[:, t] = last
    return adv, adv + value


def make_gae_numba() -> Callable | None:
    """A numba-jitted ``[N, T]`` GAE (trajectory-major double loop), or None without numba."""
    if importlib.util.find_spec("numba") is None:
        return None
    import numba

    @numba.njit(cache=False)
    def _gae(reward, value, next_value, terminated, done, gamma, lmbda):
        adv = np.empty_like(reward)
        gl = reward.dtype.type(gamma * lmbda)
        g = reward.dtype.type(gamma)
        for i in range(reward.shape[0]):
            last = reward.dtype.type(0.0)
            for t in range(reward.shape[1] - 1, -1, -1):
                nv = reward.dtype.type(0.0) if terminated[i, t] else next_value[i, t]
                delta = reward[i, t] + g * nv - value[i, t]
                last = delta if done[i, t] else delta + gl * last
                adv[i, t] = last
        return adv, adv + value

    return _gae


def reference64(d: dict[str, np.ndarray]) -> np.ndarray:
    """Float64 advantages from the numpy loop, the correctness reference."""
    tm = {k: np.ascontiguousarray(v.T) for k, v in d.items()}
    tm = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in tm.items()}
    return gae_numpy(**tm, gamma=GAMMA, lmbda=LMBDA)[0].T


def run(quick: bool = False, reps: int | None = None) -> dict:
    """Times rlrun's ``gae`` and the references; checks errors against float64."""
    torch.set_num_threads(1)
    n, t = (1000, 1000)
    reps = reps or (5 if quick else 31)  # ~0.15 s each; more reps steady the median on a shared host
    d = make_data(n, t)
    td = {k: torch.from_numpy(v) for k, v in d.items()}  # rlrun's layout: [N, T], time last
    tm = {k: np.ascontiguousarray(v.T) for k, v in d.items()}  # SB3's layout: [T, N]
    cases: dict[str, Callable] = {
        "rlrun": lambda: gae(**td, gamma=GAMMA, lmbda=LMBDA),
        "numpy": lambda: gae_numpy(**tm, gamma=GAMMA, lmbda=LMBDA),
        "numpy+T": lambda: gae_numpy(**{k: np.ascontiguousarray(v.T) for k, v in d.items()},
                                     gamma=GAMMA, lmbda=LMBDA),
        "torch": lambda: gae_torch(**td, gamma=GAMMA, lmbda=LMBDA),
        "rlrun[torch]": lambda: gae(**td, gamma=GAMMA, lmbda=LMBDA, backend="torch"),
    }
    start = time.perf_counter()
    outputs = {
        "rlrun": cases["rlrun"]()[0].numpy(),  # the first call compiles (or loads) the kernel
    }
    rlrun_first_call_s = time.perf_counter() - start
    outputs |= {
        "numpy": cases["numpy"]()[0].T,
        "numpy+T": cases["numpy+T"]()[0].T,
        "torch": cases["torch"]()[0].numpy(),
        "rlrun[torch]": cases["rlrun[torch]"]()[0].numpy(),
    }
    backend = "numba" if importlib.util.find_spec("numba") else "torch"
    notes, compile_s = [f"rlrun ran its {backend} backend; its first call took {rlrun_first_call_s:.2f} s "
                        "(kernel compile or cache load, excluded)."], None
    numba_gae = make_gae_numba()
    if numba_gae is None:
        notes.append("numba reference skipped: numba does not import here.")
    else:
        start = time.perf_counter()
        outputs["numba"] = numba_gae(**d, gamma=GAMMA, lmbda=LMBDA)[0]  # compiles
        compile_s = time.perf_counter() - start
        cases["numba"] = lambda: numba_gae(**d, gamma=GAMMA, lmbda=LMBDA)
        notes.append(f"numba compile time (excluded): {compile_s:.2f} s.")
    ref = reference64(d)
    errors = {k: float(np.abs(v.astype(np.float64) - ref).max()) for k, v in outputs.items()}
    times = interleave(cases, reps)
    rows = [{"impl": k, "ms": 1e3 * median(v), "max_abs_err": errors[k],
             **({} if k == "rlrun" else {f"ratio{s}": x for s, x in
                                          zip(("", "_min", "_max"), ratio(v, times["rlrun"]).values())})}
            for k, v in times.items()]
    return {"workload": {"trajectories": n, "steps": t, "done_freq": 1e-3, "dtype": "float32",
                         "gamma": GAMMA, "lmbda": LMBDA, "reps": reps},
            "rlrun_max_abs_err": errors["rlrun"], "rlrun_matches_1e-5": errors["rlrun"] <= 1e-5,
            "rows": rows, "notes": notes, "times_s": times,
            "small": small_rows(reps) if importlib.util.find_spec("numba") else []}


SMALL_SIZES = ((8, 5, 0), (8, 128, 0), (2, 1024, 0), (8, 512, 0), (1, 4096, 0), (8, 100, 3), (8, 512, 3))


def small_rows(reps: int) -> list[dict]:
    """Median ms per call of the numpy path and of the kernel at short runs' batch sizes."""
    warm_up()
    rows = []
    for envs, steps, agents in SMALL_SIZES:
        d = make_data(envs, steps * max(agents, 1), done_freq=0.01)
        shape = (envs, steps, agents) if agents else (envs, steps)
        data = [torch.from_numpy(d[k]).reshape(shape) for k in ("reward", "value", "next_value")]
        flags = [torch.from_numpy(d[k][:, :steps]).contiguous() for k in ("terminated", "done")]
        times = interleave({b: functools.partial(gae, *data, *flags, GAMMA, LMBDA, backend=b,
                                                 agents=bool(agents)) for b in ("numpy", "numba")}, reps)
        size = f"{envs} x {steps}" + (f" x {agents}" if agents else "")
        rows.append({"size": size, "elements": envs * steps * max(agents, 1),
                     "numpy_ms": 1e3 * median(times["numpy"]), "kernel_ms": 1e3 * median(times["numba"])})
    return rows


def render(result: dict) -> str:
    """The result as a Markdown table."""
    cols = [("impl", "implementation", "s"), ("ms", "median ms", ".1f"),
            ("ratio", "ref time / rlrun time", ".2f"), ("ratio_min", "min", ".2f"),
            ("ratio_max", "max", ".2f"), ("max_abs_err", "max abs err vs float64", ".1e")]
    ok = "matches" if result["rlrun_matches_1e-5"] else "DOES NOT match"
    notes = [f"rlrun {ok} the float64 reference to 1e-5 "
             f"(max abs error {result['rlrun_max_abs_err']:.1e}).", *result["notes"]]
    small = table(result.get("small", []), [("size", "batch", "s"), ("elements", "elements", "d"),
                                             ("numpy_ms", "numpy path ms", ".2f"),
                                             ("kernel_ms", "kernel ms", ".3f")])
    return "\n".join([table(result["rows"], cols), *(f"\n{n}" for n in notes),
                      "\nSmall batches, per call:\n", small])
