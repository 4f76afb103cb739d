"""The worker side of ``multi_sync``/``multi_async`` (``rlrun.collectors.multiprocess``): what each
worker runs.

A worker builds its env from a cloudpickled factory, keeps a private CPU copy of the
policy (reloaded from shared memory when the main process pushes new weights), runs
rlrun's :class:`~rlrun.collectors.sync.SyncCollector` for each rollout it is asked for and
copies the rollout into its shared-memory slot; commands and replies are small tuples.
"""

from __future__ import annotations

import copy
import os
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

import cloudpickle
import numpy as np
import torch
import torch.multiprocessing as mp
from torch import Tensor, nn

from rlrun.collectors.sync import SyncCollector
from rlrun.core.signals import die_with_parent, survive_stop_signals

SEED_STRIDE = 100_003  # worker w is seeded with seed + w * SEED_STRIDE (worker 0 == a SyncCollector)


def _die_with_main_process() -> None:
    """Ends this worker as soon as the main process dies, whatever killed it.

    A watchdog thread blocks on multiprocessing's parent sentinel (a pipe whose
    other end only the main process holds: EOF = the main process is gone). The
    OS parent is no use with a forkserver: it is the server, which itself waits
    for every worker to exit. ``PR_SET_PDEATHSIG`` adds the kernel's guarantee
    for ``spawn`` workers, whose OS parent is the main process.
    """
    parent = mp.parent_process()
    if parent is not None:
        threading.Thread(target=lambda: (wait([parent.sentinel]), os._exit(1)), daemon=True,
                         name="rlrun-parent-watchdog").start()
    die_with_parent()


def policy_fn(module: nn.Module, method: str) -> Callable[[Tensor], dict[str, Tensor]]:
    fn = getattr(module, method)

    def act(obs: Tensor) -> dict[str, Tensor]:
        out = fn(obs)
        return out if isinstance(out, dict) else {"action": out}
    return act


def _pull_weights(shared: dict[str, Tensor], local: dict[str, Tensor], seq: Tensor, seen: int) -> int:
    """Copies the shared weights if their sequence number moved; returns the sequence copied."""
    while True:
        s = int(seq[0])
        if s == seen:
            return seen
        if s % 2:  # the main process is writing
            time.sleep(0.0005)
            continue
        for k, t in local.items():
            t.copy_(shared[k])
        if int(seq[0]) == s:  # no write started meanwhile: a consistent copy
            return s


def _worker(index: int, workers: int, env_fn_bytes: bytes, shared_policy: nn.Module, method: str,
            options: dict, seq: Tensor, cmd_q: Any, res_q: Any) -> None:
    _die_with_main_process()
    survive_stop_signals()  # Ctrl-C and SLURM's signals reach the whole group: the main process decides
    env = None
    try:
        torch.set_num_threads(1)
        seed = options["seed"] + SEED_STRIDE * index
        torch.manual_seed(seed)
        env = cloudpickle.loads(env_fn_bytes)()
        local = copy.deepcopy(shared_policy)
        local_sd, shared_sd = local.state_dict(), shared_policy.state_dict()
        seen = _pull_weights(shared_sd, local_sd, seq, -1)
        policy = policy_fn(local, method)
        n = env.num_envs
        coll = SyncCollector(env, policy, n, 2**62, options["init_random_frames"], seed)
        res_q.put(("spec", index, _spec(env, policy)))
        slots: dict[str, Tensor] = {}
        while True:
            cmd = cmd_q.get()
            kind = cmd[0]
            if kind == "slots":
                slots = cmd[1]
            elif kind == "collect":
                _, slot, steps = cmd
                seen = _pull_weights(shared_sd, local_sd, seq, seen)
                coll.frames_per_batch = steps * n
                td = coll.collect()
                for key, buf in slots.items():
                    if key == "traj_ids":
                        buf[slot, :, :steps] = td["collector", "traj_ids"] * workers + index
                    elif key in td.keys(include_nested=True):
                        buf[slot, :, :steps] = td[key]
                    else:  # a warm-up batch of random actions has no policy extras
                        buf[slot, :, :steps] = 0
                returns, lengths = coll.pop_episode_stats()
                res_q.put(("rollout", index, slot, steps, seen // 2, returns, lengths))
            elif kind == "get_state":
                state = coll.state_dict()
                res_q.put(("state", index, {"frames": state["frames"], "next_traj": state["next_traj"],
                                            "generator": state["generator"].numpy(),
                                            "torch_rng": torch.get_rng_state().numpy()}))
            elif kind == "set_state":
                state = cmd[1]
                coll.load_state_dict({"frames": state["frames"], "next_traj": state["next_traj"],
                                      "generator": torch.from_numpy(state["generator"])})
                torch.set_rng_state(torch.from_numpy(state["torch_rng"]))
                res_q.put(("ack", index))
            elif kind == "close":
                # exit without flushing: a worker killed while writing may hold the queue's lock,
                # and Python's exit would wait on it for ever (the main process reads nothing more)
                res_q.cancel_join_thread()
                return
    except BaseException:
        res_q.put(("error", index, traceback.format_exc()))
    finally:
        if env is not None:
            env.close()


def _spec(env, policy: Callable[[Tensor], dict[str, Tensor]]) -> dict[str, tuple[tuple[int, ...], Any]]:
    """Per-step shapes and dtypes of every recorded key (the policy probed without using up RNG)."""
    s = env.spec
    obs = torch.zeros((env.num_envs, *s.observation_shape), dtype=torch.from_numpy(
        np.zeros(0, s.observation_dtype)).dtype)
    rng = torch.get_rng_state()
    with torch.inference_mode():
        outs = policy(obs)
    torch.set_rng_state(rng)
    spec: dict[Any, tuple[tuple[int, ...], Any]] = {
        "observation": (tuple(obs.shape[1:]), obs.dtype),
        ("next", "observation"): (tuple(obs.shape[1:]), obs.dtype),
        ("next", "reward"): ((1,), torch.float32),
        **{("next", k): ((1,), torch.bool) for k in ("terminated", "truncated", "done")},
        "traj_ids": ((), torch.int64),
        "num_envs": env.num_envs,
    }
    spec.update({k: (tuple(v.shape[1:]), v.dtype) for k, v in outs.items()})
    return spec
