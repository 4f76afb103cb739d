"""Multi-process collectors on one machine: ``multi_sync`` and ``multi_async``.

Each worker process owns a vector env (built from a picklable factory) and a
CPU copy of the policy, and runs rlrun's own :class:`SyncCollector` loop on
them, so that rollouts have exactly the single-process semantics (true final
observations, termination vs truncation, life loss, reward scale/clip, random
warm-up frames, trajectory ids, episode returns). A finished rollout is copied
once into a preallocated shared-memory slot; the worker then sends one small
control message ``(worker, slot, steps, policy version, finished episodes)``.
Nothing is pickled per step.

* ``multi_sync``: every batch is all workers' rollouts of the same length,
  concatenated along the env dim (``[workers * num_envs, T]``), collected with
  the same policy version: on-policy algorithms see one policy per batch.
* ``multi_async``: each batch is ``rollouts_per_batch`` rollouts (default
  one), in arrival order from whichever workers are ready (IMPALA's learner
  batches 32 of them), concatenated along the env dim. Every worker has two
  slots, so it collects its next rollout while the learner consumes the
  previous one; batches carry the policy version that collected
  them (policy lag = current version - batch version).

Weights travel through shared memory: ``update_policy_weights`` copies the
source policy's state dict into a shared CPU copy under a sequence counter
(odd while writing); a worker reloads its private copy when the counter has
moved, at the start of a rollout, so a rollout never mixes two versions.

Failure policy: a worker that raises sends its traceback and exits; a worker
that dies without one (SIGKILL, OOM) is noticed within ``poll_s``; either way
the collector shuts every worker down and raises :class:`WorkerError` (one line
naming the worker and its pid, then its traceback if it sent one; the command
exits with ``WorkerError.exit_code``). The run ends ``failed`` and keeps its last
periodic checkpoint: none is written at the failure, as the dead worker's env
and RNG state are gone; rerunning the same command resumes from the last one
(``tests/collectors/test_multiprocess_run.py``). Restarting a worker silently would
hide a broken env. No orphans: workers exit on ``shutdown()`` (context manager,
``atexit``, errors, ``__del__``) and at once when the main process dies, however
it died (a watchdog thread on the parent sentinel; ``PR_SET_PDEATHSIG`` too on
Linux with ``spawn``).
"""

from __future__ import annotations

import atexit
import copy
import queue
import signal
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import cloudpickle
import numpy as np
import torch
import torch.multiprocessing as mp
from tensordict import TensorDict
from torch import Tensor, nn

from rlrun.collectors.workers.loop import SEED_STRIDE, _worker  # noqa: F401  (SEED_STRIDE: API)
from rlrun.core.contracts import FrameSource
from rlrun.core.errors import ConfigError, WorkerError  # noqa: F401  (WorkerError: this module's API too)
from rlrun.core.limits import check_workers_fit
from rlrun.core.registry import NonNegativeInt, PositiveFloat, PositiveInt, register
from rlrun.core.signals import stop_signals_blocked

ASYNC_SLOTS = 2


# ---------------------------------------------------------------- main side

def _shutdown_ref(ref: weakref.ref) -> None:
    collector = ref()
    if collector is not None:
        collector.shutdown()


class MultiCollector(FrameSource):
    """Collects with ``workers`` processes, each stepping its own vector env.

    Args:
        env_fn: Picklable (by cloudpickle) callable returning a ``GymVecEnv``; each worker calls it once.
        policy: The acting policy module (e.g. ``models.actor``), on any device. Workers get
            a CPU copy; ``update_policy_weights()`` pushes its current weights.
        frames_per_batch: Frames per yielded batch. ``sync``: all workers together, a multiple
            of ``workers * num_envs``; ``async``: ``rollouts_per_batch`` rollouts, a multiple of
            ``rollouts_per_batch * num_envs``.
        total_frames: Frames to yield in all, rounded up to the step width (``workers * num_envs``
            for sync, ``num_envs`` for async); the last rollouts are shortened to hit it exactly.
        workers: Worker processes.
        mode: ``"sync"`` or ``"async"``.
        method: The policy method workers call: ``"explore"`` (sampling), ``"act"`` (deterministic)
            or ``"forward"``; it returns ``{"action": ..., **extras}`` or the action tensor.
        init_random_frames: Leading frames with uniform random actions (split over workers).
        seed: Worker ``w`` uses ``seed + w * SEED_STRIDE`` for its envs, actions and torch RNG.
        device: Where batches are put.
        start_method: ``"spawn"`` or ``"forkserver"`` (never ``"fork"``: torch threads).
        timeout_s: Raise :class:`WorkerError` when no worker reports for this long.
        rollouts_per_batch: ``async`` only: rollouts gathered per batch, in arrival order (the
            last batch of the budget may hold fewer).
        poll_s: How often a waiting main process checks that its workers are alive.

    Examples:
        >>> import functools
        >>> from rlrun.envs.gym import GymVecEnv
        >>> with MultiCollector(functools.partial(GymVecEnv, "CartPole-v1", 2), policy, 8, 16,
        ...                     workers=2) as coll:                                 # doctest: +SKIP
        ...     [b.batch_size for b in coll]
        [torch.Size([4, 2]), torch.Size([4, 2])]
    """

    def __init__(self, env_fn: Callable[[], Any], policy: nn.Module, frames_per_batch: int,
                 total_frames: int, workers: int = 2, mode: str = "sync", method: str = "explore",
                 init_random_frames: int = 0,
                 seed: int = 0, device: str = "cpu",
                 start_method: str = "forkserver", timeout_s: float = 600.0, poll_s: float = 0.2,
                 rollouts_per_batch: int = 1):
        self._closed, self._procs, self._cmd_qs, self._res_q = True, [], [], None  # for an early __del__
        if mode not in ("sync", "async"):
            raise ConfigError(f"unknown collector mode {mode!r}", key="collector.mode",
                              fix="use sync or async")
        if workers < 1:
            raise ConfigError(f"need at least one worker, got {workers}", key="collector.workers",
                              fix="set collector.workers >= 1")
        if start_method not in ("spawn", "forkserver"):
            raise ConfigError(f"start method {start_method!r} is not supported", key="collector.start_method",
                              fix="use spawn or forkserver (fork is unsafe with torch threads)")
        if rollouts_per_batch < 1 or (mode == "sync" and rollouts_per_batch != 1):
            raise ConfigError(f"rollouts_per_batch={rollouts_per_batch} needs the async mode and >= 1",
                              key="collector.rollouts_per_batch",
                              fix="use collector=multi_async, or remove collector.rollouts_per_batch")
        self.rollouts_per_batch = rollouts_per_batch
        self.mode, self.workers, self.device = mode, workers, torch.device(device)
        self.timeout_s, self.poll_s = timeout_s, poll_s
        self.frames, self.policy_version = 0, 0
        self._source = policy
        self._returns: list[float] = []
        self._lengths: list[int] = []
        self._pending: deque = deque()  # rollouts received while waiting for something else
        self._inflight = 0
        self._last_check = time.monotonic()
        ctx = mp.get_context(start_method)
        if start_method == "forkserver":
            # the server imports torch, tensordict and gymnasium once; each worker is then a fork of it
            ctx.set_forkserver_preload(["rlrun.collectors.multiprocess", "rlrun.collectors.workers.server"])
        shared = copy.deepcopy(policy).cpu()
        for p in shared.parameters():
            p.requires_grad_(False)
        self._shared = shared.share_memory()
        self._shared_sd = self._shared.state_dict()
        self._seq = torch.zeros(1, dtype=torch.int64).share_memory_()
        with stop_signals_blocked():  # the queues start multiprocessing's resource tracker
            self._res_q = ctx.Queue()
            self._cmd_qs = [ctx.Queue() for _ in range(workers)]
        self._closed = False
        options = {"seed": seed, "init_random_frames": -(-init_random_frames // workers)}
        env_bytes = cloudpickle.dumps(env_fn)
        atexit.register(_shutdown_ref, weakref.ref(self))
        try:
            with stop_signals_blocked():  # the first start also starts the forkserver
                for w in range(workers):
                    p = ctx.Process(target=_worker, name=f"rlrun-collector-{w}", args=(
                        w, workers, env_bytes, self._shared, method, options, self._seq, self._cmd_qs[w],
                        self._res_q))
                    p.start()
                    self._procs.append(p)
            specs = [self._wait("spec")[2] for _ in range(workers)]
            self.num_envs = int(specs[0].pop("num_envs"))
            width = self.num_envs * (workers if mode == "sync" else rollouts_per_batch)
            if frames_per_batch % width:
                raise ConfigError(
                    f"{frames_per_batch} frames per batch do not split over {width} envs "
                    f"({'workers' if mode == 'sync' else 'rollouts_per_batch'} x env.num_envs)",
                    key="collector.frames_per_batch", fix=f"use a multiple of {width}")
            self.frames_per_batch = frames_per_batch
            self.steps = frames_per_batch // width
            step_width = self.num_envs * (workers if mode == "sync" else 1)
            self.total_frames = -(-total_frames // step_width) * step_width
            slots = 1 if mode == "sync" else ASYNC_SLOTS
            self._slots = [{k: torch.zeros((slots, self.num_envs, self.steps, *shape), dtype=dtype)
                            .share_memory_() for k, (shape, dtype) in specs[0].items()}
                           for _ in range(workers)]
            for w in range(workers):
                self._cmd_qs[w].put(("slots", self._slots[w]))
        except BaseException:
            self.shutdown()
            raise

    # -- protocol

    def __iter__(self) -> Iterator[TensorDict]:
        self._check_open()
        if self.mode == "sync":
            yield from self._iter_sync()
        else:
            yield from self._iter_async()

    def update_policy_weights(self, state_dict: Mapping[str, Tensor] | None = None) -> None:
        """Pushes ``state_dict`` (default: the source policy's own) to the workers; bumps the version."""
        source = self._source.state_dict() if state_dict is None else state_dict
        with torch.no_grad():
            self._seq += 1  # odd: a worker that starts a rollout now waits for the copy to end
            for k, t in self._shared_sd.items():
                t.copy_(source[k])
            self._seq += 1
        self.policy_version = int(self._seq[0]) // 2

    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        stats = self._returns, self._lengths
        self._returns, self._lengths = [], []
        return stats

    def state_dict(self) -> dict:
        """Frames, version and each worker's collector and torch RNG state.

        Sync: taken between batches, so a resumed run continues exactly as the
        single-process collector does (fresh episodes, same counters and RNG).
        Async: rollouts in flight are dropped and their frames recollected.
        """
        self._check_open()
        for q in self._cmd_qs:
            q.put(("get_state",))
        states: dict[int, dict] = {}
        while len(states) < self.workers:
            _, w, s = self._wait("state")
            states[w] = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in s.items()}
        return {"frames": self.frames, "policy_version": self.policy_version,
                "workers": [states[w] for w in range(self.workers)]}

    def load_state_dict(self, state: dict) -> None:
        self._check_open()
        if len(state["workers"]) != self.workers:
            raise ValueError(f"the checkpoint has {len(state['workers'])} collector workers, this run "
                             f"{self.workers}")
        if self._inflight:
            raise RuntimeError("load_state_dict() must be called before iterating")
        for q, s in zip(self._cmd_qs, state["workers"]):
            q.put(("set_state", {k: v.numpy() if isinstance(v, Tensor) else v for k, v in s.items()}))
        for _ in range(self.workers):
            self._wait("ack")
        self.frames = int(state["frames"])
        self._seq.fill_(2 * int(state["policy_version"]))
        self.policy_version = int(state["policy_version"])
        self.update_policy_weights()  # the caller restored the source policy's weights first

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Stops the workers (asking first, then SIGKILL: they ignore SIGTERM); idempotent."""
        if self._closed:
            return
        self._closed = True
        for q in self._cmd_qs:
            try:
                q.put(("close",))
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + timeout_s
        for p in self._procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self._procs:
            if p.is_alive():
                p.kill()
                p.join()
        for q in (*self._cmd_qs, *([self._res_q] if self._res_q is not None else [])):
            q.cancel_join_thread()  # never block exit on undelivered messages to dead workers
            q.close()

    @property
    def worker_pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    # -- internals

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this collector was shut down")

    def _iter_sync(self) -> Iterator[TensorDict]:
        while self.frames < self.total_frames:
            steps = min(self.steps, (self.total_frames - self.frames) // (self.num_envs * self.workers))
            for q in self._cmd_qs:
                q.put(("collect", 0, steps))
            self._inflight = self.workers
            got = {}
            while len(got) < self.workers:
                msg = self._wait("rollout")
                got[msg[1]] = msg
            self._inflight = 0
            parts = [self._take(*got[w][1:]) for w in range(self.workers)]
            batch = torch.cat(parts, 0) if len(parts) > 1 else parts[0]
            self.frames += batch.numel()
            yield batch

    def _iter_async(self) -> Iterator[TensorDict]:
        dispatched = self.frames

        def dispatch(w: int, slot: int) -> None:
            nonlocal dispatched
            steps = min(self.steps, (self.total_frames - dispatched) // self.num_envs)
            if steps > 0:
                self._cmd_qs[w].put(("collect", slot, steps))
                dispatched += steps * self.num_envs
                self._inflight += 1

        for slot in range(ASYNC_SLOTS):
            for w in range(self.workers):
                dispatch(w, slot)
        while self.frames < self.total_frames:
            parts: list[TensorDict] = []
            while len(parts) < self.rollouts_per_batch and self._inflight:
                msg = self._wait("rollout")
                self._inflight -= 1
                parts.append(self._take(*msg[1:]))
                dispatch(msg[1], msg[2])  # the worker is busy with its other slot: keep its queue full
            # the budget's shortened last rollouts may differ in length: one batch per length
            for steps in dict.fromkeys(p.shape[1] for p in parts):
                same = [p for p in parts if p.shape[1] == steps]
                batch = torch.cat(same, 0) if len(same) > 1 else same[0]
                self.frames += batch.numel()
                yield batch

    def _take(self, w: int, slot: int, steps: int, version: int, returns: list, lengths: list) -> TensorDict:
        """The slot's rollout as a fresh TensorDict (the slot is reused for the next rollout)."""
        self._returns.extend(returns)
        self._lengths.extend(lengths)
        on_cpu, n = self.device.type == "cpu", self.num_envs

        def get(key: Any) -> Tensor:
            v = self._slots[w][key][slot, :, :steps]
            return v.clone() if on_cpu else v.to(self.device)

        keys = list(self._slots[w])
        full = (n, steps)
        return TensorDict({
            **{k: get(k) for k in keys if isinstance(k, str) and k != "traj_ids"},
            "next": {k[1]: get(k) for k in keys if isinstance(k, tuple)},
            "collector": {"traj_ids": get("traj_ids"),
                          "policy_version": torch.full(full, version, dtype=torch.int64, device=self.device),
                          "worker": torch.full(full, w, dtype=torch.int64, device=self.device)},
        }, batch_size=full, device=self.device)

    def _wait(self, kind: str) -> tuple:
        """The next message of ``kind``; raises WorkerError if a worker failed or went silent."""
        start = time.monotonic()
        while True:
            # liveness is checked on a clock, not only when the queue is quiet: in async mode one
            # worker's steady rollouts must not hide another's death
            if time.monotonic() - self._last_check >= self.poll_s:
                self._check_workers(start)
                self._last_check = time.monotonic()
            if kind == "rollout" and self._pending:
                return self._pending.popleft()
            try:
                msg = self._res_q.get(timeout=self.poll_s)
            except queue.Empty:
                continue
            if msg[0] == "error":
                self._fail_raised(msg[1], msg[2])
            if msg[0] == kind:
                return msg
            if msg[0] == "rollout":
                self._pending.append(msg)

    def _check_workers(self, start: float) -> None:
        for w, p in enumerate(self._procs):
            if not p.is_alive():
                try:  # it may have sent its traceback just before exiting
                    while True:
                        msg = self._res_q.get(timeout=0.1)
                        if msg[0] == "error":
                            self._fail_raised(msg[1], msg[2])
                        if msg[0] == "rollout":
                            self._pending.append(msg)
                except queue.Empty:
                    pass
                code = p.exitcode
                how = (f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0
                       else f"exited with code {code}")
                self._fail(f"collector worker {w} (pid {p.pid}) {how} without a traceback "
                           "(out of memory? killed from outside?)")
        if time.monotonic() - start > self.timeout_s:
            self._fail(f"no message from the collector workers for {self.timeout_s:.0f} s "
                       "(an env hangs?); raise collector.timeout_s if rollouts are this slow")

    def _fail(self, what: str, traceback_text: str = "") -> None:
        self.shutdown()
        raise WorkerError(what, traceback_text)

    def _fail_raised(self, w: int, traceback_text: str) -> None:
        last = traceback_text.strip().splitlines()[-1] if traceback_text.strip() else "an error"
        self._fail(f"collector worker {w} (pid {self._procs[w].pid}) raised {last}", traceback_text)


@dataclass(frozen=True)
class RemoteBackend:
    """Workers that run elsewhere (``collector.backend=ray``): how to build the collector and how to
    check the address before anything is built."""

    make: Callable[..., Any]
    check_address: Callable[[str | None, str], None]


# filled by the modules of remote backends when the components load (rlrun.collectors.ray_actors adds "ray"),
# so this module imports none of them: the Ray collector builds on this one, not the other way round
BACKENDS: dict[str, RemoteBackend] = {}


def _make(mode: str, env, policy, frames_per_batch: int, total_frames: int, workers: int,
          init_random_frames: int, explore: bool, seed: int, device: str, start_method: str,
          timeout_s: float, rollouts_per_batch: int = 1, backend: str = "local",
          ray_address: str | None = None) -> Any:
    if explore and policy.exploration is not None:
        raise ConfigError("multi-process collectors act with the actor's own sampling; exploration noise "
                          "components run in the main process only", key="collector.name",
                          fix="use collector=sync with exploration, or an algorithm with a stochastic actor")
    if backend in BACKENDS:
        return BACKENDS[backend].make(mode, env, policy, frames_per_batch, total_frames, workers,
                                      init_random_frames, explore, seed, device, ray_address,
                                      rollouts_per_batch, timeout_s)
    if backend != "local":
        raise ConfigError(f"unknown collector backend {backend!r}", key="collector.backend",
                          fix="use local (worker processes on this machine) or ray")
    env_fn = getattr(env, "factory", None)
    if env_fn is None:
        raise ConfigError(f"{type(env).__name__} cannot be rebuilt in a worker (no .factory)", key="env.name",
                          fix="use a GymVecEnv-based env (env=gym or env=atari)")
    # the builder made `env` for its spec and closes it itself; each worker builds its own from env.factory
    return MultiCollector(env_fn, policy.actor, frames_per_batch, total_frames, workers, mode,
                          "explore" if explore else "act", init_random_frames,
                          seed, device, start_method=start_method,
                          timeout_s=timeout_s, rollouts_per_batch=rollouts_per_batch)


StartMethod = Literal["forkserver", "spawn"]
Backend = Literal["local", "ray"]


def _check_options(node: dict, key: str) -> None:
    """The rules between options, run with the signature's checks (``registry.check_kwargs``), so
    before anything is built: the Ray address's form, and workers that fit this machine unless they
    run on a cluster it joins."""
    workers, backend, address = node.get("workers", 2), node.get("backend", "local"), node.get("ray_address")
    if backend in BACKENDS:
        BACKENDS[backend].check_address(address, f"{key}.ray_address")
    if backend == "local" or address is None:
        check_workers_fit(int(workers), "local" if backend == "local" else "ray", f"{key}.workers")


@register("collector", "multi_sync", options=_check_options)
def make_multi_sync_collector(env, policy, frames_per_batch: PositiveInt, total_frames: int,
                              workers: PositiveInt = 2, init_random_frames: NonNegativeInt = 0,
                              explore: bool = True, seed: int = 0, device: str = "cpu",
                              start_method: StartMethod = "forkserver", timeout_s: PositiveFloat = 600.0,
                              backend: Backend = "local", ray_address: str | None = None) -> Any:
    """Worker processes, each with its own copy of the env; every batch is all workers' rollouts.

    The loop pushes the actor's weights to the workers after every batch's
    optimisation, so each batch comes from the current policy (on-policy
    algorithms as with ``sync``). ``backend=ray`` runs the workers as Ray actors
    (``rlrun.collectors.ray_actors``) on the cluster at ``ray_address``.
    """
    return _make("sync", env, policy, frames_per_batch, total_frames, workers, init_random_frames,
                 explore, seed, device, start_method, timeout_s, 1, backend, ray_address)


@register("collector", "multi_async", options=_check_options)
def make_multi_async_collector(env, policy, frames_per_batch: PositiveInt, total_frames: int,
                               workers: PositiveInt = 2, init_random_frames: NonNegativeInt = 0,
                               explore: bool = True, seed: int = 0, device: str = "cpu",
                               start_method: StartMethod = "forkserver", timeout_s: PositiveFloat = 600.0,
                               rollouts_per_batch: PositiveInt = 1, backend: Backend = "local",
                               ray_address: str | None = None) -> Any:
    """Worker processes collecting without waiting; each batch is ``rollouts_per_batch`` workers'
    rollouts, in arrival order.

    Batches carry the policy version that collected them (for off-policy
    corrections such as V-trace); the loop pushes weights after every batch's optimisation.
    """
    return _make("async", env, policy, frames_per_batch, total_frames, workers, init_random_frames,
                 explore, seed, device, start_method, timeout_s, rollouts_per_batch, backend, ray_address)
