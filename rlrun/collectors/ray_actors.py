"""Collectors whose workers are Ray actors: ``collector.backend=ray`` for ``multi_sync``/``multi_async``.

The same protocol and the same batches as :mod:`rlrun.collectors.multiprocess`, on as
many machines as a Ray cluster has: each actor owns a vector env (rebuilt from
the env's picklable factory) and a CPU copy of the policy, and runs rlrun's
:class:`~rlrun.collectors.sync.SyncCollector` loop, so rollouts keep the single-process
semantics. ``collector.ray_address`` picks the cluster: ``auto`` (the one this
machine belongs to: ``ray start`` ran here, as ``hydra/launcher=slurm_ray``
does), an address such as ``10.0.0.1:6379``, or ``null`` for a local instance
with one CPU per worker, which ``shutdown()`` stops again. A cluster the run
connected to is left running.

* ``sync``: every batch is all actors' rollouts, collected with one policy version.
* ``async``: each batch is ``rollouts_per_batch`` rollouts in completion order
  (``ray.wait``); an actor starts its next rollout as soon as its last one is taken.

Weights go through Ray's object store: ``update_policy_weights`` puts the state
dict once per version, and each actor receives the reference with its next
``collect`` call when its copy is older. Rollouts come back as TensorDicts
(numpy-backed tensors travel zero-copy on one node).

Failure policy, as for the local workers: an actor that raises, or dies (its
process killed, its node lost), ends the iteration with a
:class:`~rlrun.collectors.multiprocess.WorkerError` naming the worker (one line; an
actor that raised adds Ray's report of its traceback); every actor is killed
first (and a local Ray stopped), and the run ends ``failed`` with its last
periodic checkpoint (exit code 4).

A local Ray listens on the loopback interface only (:func:`_init_local_ray`); a
cluster address is checked for its form with the config and probed before Ray
is asked to join it (:func:`_join_cluster`), as Ray retries an address where
nothing answers for minutes.
"""

from __future__ import annotations

import copy
import os
import re
import socket
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlrun.collectors.multiprocess import BACKENDS, RemoteBackend
from rlrun.collectors.sync import SyncCollector
from rlrun.collectors.workers.loop import SEED_STRIDE, policy_fn
from rlrun.core.contracts import FrameSource
from rlrun.core.errors import ConfigError, WorkerError
from rlrun.core.signals import survive_stop_signals

_MISSING_FIX = "pip install 'rlrun[ray]' (ray 2.60), or use collector.backend=local"
ADDRESS_KEY = "collector.ray_address"
# host:port, optionally ray://host:port (Ray Client); a host is a name, an IPv4 or a [bracketed] IPv6
_ADDRESS = re.compile(r"^(?:ray://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)"
                      r":(?P<port>[0-9]{1,5})$")
PROBE_S = 5.0  # a cluster's head answers a TCP connect at once; nothing answering within this is no cluster


class _Worker:
    """One Ray actor: a vector env, a CPU policy copy and a SyncCollector over them."""

    def __init__(self, index: int, workers: int, env_fn: Callable[[], Any], policy: nn.Module, method: str,
                 init_random_frames: int, seed: int):
        survive_stop_signals()  # SLURM signals every process of the step: the driver decides
        torch.set_num_threads(1)
        self.index, self.workers, self.version = index, workers, -1
        seed = seed + SEED_STRIDE * index
        torch.manual_seed(seed)
        self.env = env_fn()
        self.policy = policy
        self.coll = SyncCollector(self.env, policy_fn(policy, method), self.env.num_envs, 2**62,
                                  init_random_frames, seed)

    def num_envs(self) -> int:
        return self.env.num_envs

    def collect(self, steps: int, version: int, weights: dict[str, Tensor] | None) -> tuple:
        if weights is not None and version != self.version:
            self.policy.load_state_dict(weights)
            self.version = version
        self.coll.frames_per_batch = steps * self.env.num_envs
        td = self.coll.collect()
        td["collector", "traj_ids"] = td["collector", "traj_ids"] * self.workers + self.index
        returns, lengths = self.coll.pop_episode_stats()
        return td, self.version, returns, lengths

    def get_state(self) -> dict:
        return {**self.coll.state_dict(), "torch_rng": torch.get_rng_state()}

    def set_state(self, state: dict) -> None:
        self.coll.load_state_dict({k: state[k] for k in ("frames", "next_traj", "generator")})
        torch.set_rng_state(state["torch_rng"])

    def close(self) -> None:
        self.env.close()


class RayCollector(FrameSource):
    """Collects with ``workers`` Ray actors (see the module docstring).

    Args:
        env_fn: Picklable callable returning a ``GymVecEnv``; each actor calls it once.
        policy: The acting policy module (e.g. ``policy.actor``); actors get a CPU copy.
        frames_per_batch: As :class:`~rlrun.collectors.multiprocess.MultiCollector`.
        total_frames: Frames to yield, rounded up to the step width; the last rollouts are shortened.
        workers: Ray actors.
        mode: ``"sync"`` or ``"async"``.
        method: The policy method actors call (``"explore"``, ``"act"`` or ``"forward"``).
        init_random_frames: Leading frames of uniform random actions (split over the actors).
        seed: Actor ``w`` uses ``seed + w * SEED_STRIDE``, as the local workers do.
        device: Where batches are put.
        address: ``"auto"``, a cluster address, or None for a local instance of ``workers`` CPUs.
        rollouts_per_batch: ``async`` only: rollouts per batch.
        timeout_s: Raise :class:`WorkerError` when no rollout arrives for this long.
    """

    def __init__(self, env_fn: Callable[[], Any], policy: nn.Module, frames_per_batch: int, total_frames: int,
                 workers: int = 2, mode: str = "sync", method: str = "explore", init_random_frames: int = 0,
                 seed: int = 0, device: str = "cpu", address: str | None = None, rollouts_per_batch: int = 1,
                 timeout_s: float = 600.0):
        self._closed, self._actors, self._started_ray = True, [], False  # for an early shutdown()
        if address is not None:
            _token_auth_if_configured()  # before ray's import, which reads the mode
        try:
            import ray
        except ImportError:
            raise ConfigError("collector.backend=ray needs ray, which is not installed",
                              key="collector.backend", fix=_MISSING_FIX) from None
        if mode not in ("sync", "async") or workers < 1 or rollouts_per_batch < 1 \
                or (mode == "sync" and rollouts_per_batch != 1):
            raise ConfigError(f"mode={mode}, workers={workers}, rollouts_per_batch={rollouts_per_batch}",
                              key="collector", fix="use workers >= 1, and rollouts_per_batch > 1 only with "
                              "multi_async")
        self._ray = ray
        self.mode, self.workers, self.device = mode, workers, torch.device(device)
        self.rollouts_per_batch, self.timeout_s = rollouts_per_batch, timeout_s
        self.frames, self.policy_version = 0, 0
        self._source = policy
        self._returns: list[float] = []
        self._lengths: list[int] = []
        self._weights = None  # the object-store reference of the current version's weights
        if not ray.is_initialized():
            if address is None:
                _init_local_ray(ray, workers)
            else:
                _join_cluster(ray, address)
            self._started_ray = address is None
        self._closed = False
        try:
            local = copy.deepcopy(policy).cpu()
            for p in local.parameters():
                p.requires_grad_(False)
            actor_cls = ray.remote(num_cpus=1, max_restarts=0)(_Worker)
            per_worker = -(-init_random_frames // workers)
            self._actors = [actor_cls.remote(w, workers, env_fn, local, method, per_worker, seed)
                            for w in range(workers)]
            self.num_envs = self._get([a.num_envs.remote() for a in self._actors])[0]
            width = self.num_envs * (workers if mode == "sync" else rollouts_per_batch)
            if frames_per_batch % width:
                raise ConfigError(f"{frames_per_batch} frames per batch do not split over {width} envs",
                                  key="collector.frames_per_batch", fix=f"use a multiple of {width}")
            self.frames_per_batch, self.steps = frames_per_batch, frames_per_batch // width
            step_width = self.num_envs * (workers if mode == "sync" else 1)
            self.total_frames = -(-total_frames // step_width) * step_width
            self.update_policy_weights()
        except BaseException:
            self.shutdown()
            raise

    # -- protocol

    def __iter__(self) -> Iterator[TensorDict]:
        if self._closed:
            raise RuntimeError("this collector was shut down")
        yield from (self._iter_sync() if self.mode == "sync" else self._iter_async())

    def update_policy_weights(self, state_dict: Mapping[str, Tensor] | None = None) -> None:
        """Puts ``state_dict`` (default: the source policy's) in the object store; bumps the version."""
        source = self._source.state_dict() if state_dict is None else state_dict
        self.policy_version += 1
        self._weights = self._ray.put({k: v.detach().cpu() for k, v in source.items()})

    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        stats = self._returns, self._lengths
        self._returns, self._lengths = [], []
        return stats

    def state_dict(self) -> dict:
        """Frames, version and each actor's collector and torch RNG state (async: in-flight rollouts
        are dropped and recollected)."""
        return {"frames": self.frames, "policy_version": self.policy_version,
                "workers": self._get([a.get_state.remote() for a in self._actors])}

    def load_state_dict(self, state: dict) -> None:
        if len(state["workers"]) != self.workers:
            raise ValueError(f"the checkpoint has {len(state['workers'])} collector workers, this run "
                             f"{self.workers}")
        self._get([a.set_state.remote(s) for a, s in zip(self._actors, state["workers"])])
        self.frames = int(state["frames"])
        self.policy_version = int(state["policy_version"]) - 1
        self.update_policy_weights()  # the caller restored the source policy's weights first

    def shutdown(self) -> None:
        """Kills the actors, and stops Ray if this collector started it; idempotent."""
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        for a in self._actors:
            try:
                ray.kill(a)
            except Exception:  # already dead
                pass
        self._actors = []
        if self._started_ray and ray.is_initialized():
            ray.shutdown()

    # -- internals

    def _collect(self, w: int, steps: int):
        return self._actors[w].collect.remote(steps, self.policy_version, self._weights)

    def _iter_sync(self) -> Iterator[TensorDict]:
        while self.frames < self.total_frames:
            steps = min(self.steps, (self.total_frames - self.frames) // (self.num_envs * self.workers))
            results = self._get([self._collect(w, steps) for w in range(self.workers)])
            batch = torch.cat([self._take(w, *r) for w, r in enumerate(results)], 0)
            self.frames += batch.numel()
            yield batch

    def _iter_async(self) -> Iterator[TensorDict]:
        ray, dispatched, inflight = self._ray, self.frames, {}

        def dispatch(w: int) -> None:
            nonlocal dispatched
            steps = min(self.steps, (self.total_frames - dispatched) // self.num_envs)
            if steps > 0:
                inflight[self._collect(w, steps)] = w
                dispatched += steps * self.num_envs

        for w in range(self.workers):
            dispatch(w)
        while self.frames < self.total_frames:
            parts = []
            while len(parts) < self.rollouts_per_batch and inflight:
                ready, _ = ray.wait(list(inflight), num_returns=1, timeout=self.timeout_s)
                if not ready:
                    self._fail(f"no rollout from the Ray collector workers for {self.timeout_s:.0f} s")
                w = inflight.pop(ready[0])
                parts.append(self._take(w, *self._get([ready[0]], worker=w)[0]))
                dispatch(w)
            for steps in dict.fromkeys(p.shape[1] for p in parts):  # one batch per rollout length
                same = [p for p in parts if p.shape[1] == steps]
                batch = torch.cat(same, 0)
                self.frames += batch.numel()
                yield batch

    def _take(self, w: int, td: TensorDict, version: int, returns: list, lengths: list) -> TensorDict:
        self._returns.extend(returns)
        self._lengths.extend(lengths)
        td = td.to(self.device)
        td["collector", "policy_version"] = torch.full(td.batch_size, version, dtype=torch.int64,
                                                       device=self.device)
        td["collector", "worker"] = torch.full(td.batch_size, w, dtype=torch.int64, device=self.device)
        return td

    def _get(self, refs: list, worker: int | None = None) -> list:
        """``ray.get``, one reference at a time (``refs[i]`` is worker i's unless ``worker`` is given),
        turning a dead or failing actor into a WorkerError that names it."""
        ray, out = self._ray, []
        for i, ref in enumerate(refs):
            w = worker if worker is not None else i
            try:
                out.append(ray.get(ref, timeout=self.timeout_s))
            except ray.exceptions.GetTimeoutError:
                self._fail(f"no answer from Ray collector worker {w} for {self.timeout_s:.0f} s "
                           "(an env hangs?); raise collector.timeout_s if rollouts are this slow")
            except ray.exceptions.RayActorError:  # its process died: Ray's many-line report says no more
                self._fail(f"Ray collector worker {w} died without a traceback (its process was killed, "
                           "ran out of memory, or its node was lost)")
            except ray.exceptions.RayTaskError as err:  # the env or policy raised in the actor
                lines = str(err).strip().splitlines()
                self._fail(f"Ray collector worker {w} raised {lines[-1] if lines else 'an error'}", str(err))
        return out

    def _fail(self, what: str, report: str = "") -> None:
        self.shutdown()
        raise WorkerError(what, report)


def check_address(address: str | None, key: str = ADDRESS_KEY) -> None:
    """Raises ConfigError unless ``address`` is null, ``auto`` or ``[ray://]host:port`` (a port 1-65535)."""
    if address is None or address == "auto":
        return
    match = _ADDRESS.match(address) if isinstance(address, str) else None
    if match is None or not 1 <= int(match["port"]) <= 65535:
        raise ConfigError(f"must be auto, null or host:port, got {address!r}", key=key,
                          fix=f"set {key}=auto (the cluster `ray start` made here), {key}=<head host>:<port> "
                          f"(e.g. 10.0.0.1:6379), or {key}=null for a local Ray")


def _init_local_ray(ray: Any, workers: int) -> None:
    """Starts a Ray of ``workers`` CPUs that listens on the loopback interface only, with no dashboard.

    Ray 2.60 binds its servers (GCS, raylet, workers, the dashboard head's and agents' ports,
    the autoscaler monitor's metrics) to the node's IP, and to all interfaces unless that IP is
    a loopback address. ``ray.init(_node_ip_address="127.0.0.1")`` alone is not enough: Ray
    rewrites a loopback address to the host's (``services.resolve_ip_for_localhost``) unless
    ``ray_constants.ENABLE_RAY_CLUSTER`` is false, which is what its
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` sets at import. It is set here for the start only, as
    the variable would come too late once ray is imported; a cluster the user joins
    (``ray_address``) is untouched. The dashboard head still runs (Ray starts it in its minimal
    mode: no web UI, port 8265 closed), on 127.0.0.1 like the rest (``tests/collectors/test_ray_actors.py``
    lists every listening socket of a run).
    """
    from ray._private import ray_constants

    # the actors import what this process can (plugins, envs registered by user modules)
    path = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    saved = ray_constants.ENABLE_RAY_CLUSTER  # ray is pinned to 2.60.*; the socket test guards a change
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(num_cpus=workers, include_dashboard=False, dashboard_host="127.0.0.1",
                 _node_ip_address="127.0.0.1", configure_logging=False,
                 # Ray's own daemons' lines ("(raylet) ... RpcError" when an actor dies) would follow
                 # the run's one-line error; an actor's failure reaches the run as an exception with
                 # its traceback, and its output stays in Ray's session logs (/tmp/ray/session_*/logs)
                 log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": path}},
                 # no idle workers started ahead of the actors: they run no task of ours, and when Ray
                 # stops they crashed on a loaded machine (SIGSEGV in Ray's metrics thread), a report
                 # of many lines forwarded to the run's stderr after its one line
                 _system_config={"enable_worker_prestart": False, "prestart_worker_first_driver": False})
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


def _join_cluster(ray: Any, address: str) -> None:
    """Connects to the cluster at ``address``; an address where nothing answers fails within
    ``PROBE_S`` naming ``collector.ray_address`` (Ray itself retries for minutes, then exits)."""
    check_address(address)
    match = _ADDRESS.match(address)
    if match is not None:
        host, port = match["host"].strip("[]"), int(match["port"])
        try:
            socket.create_connection((host, port), timeout=PROBE_S).close()
        except OSError as err:
            raise ConfigError(f"no Ray cluster answers at {address} ({err.strerror or err})", key=ADDRESS_KEY,
                              fix=f"start one there (ray start --head --port={port}), join this machine's "
                              f"with {ADDRESS_KEY}=auto, or start a local Ray with {ADDRESS_KEY}=null"
                              ) from None
    try:
        ray.init(address=address, log_to_driver=True, configure_logging=False)
    except (Exception, SystemExit) as err:  # Ray exits the process when the GCS never answers
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise ConfigError(f"cannot join the Ray cluster at {address} ({reason})", key=ADDRESS_KEY,
                          fix=f"check that a Ray head runs there (ray status --address {address}), or "
                          f"use {ADDRESS_KEY}=null for a local Ray") from None


def _token_auth_if_configured() -> None:
    """Sends the token of a cluster with token authentication (Ray 2.60's default for ``ray start``).

    A driver connecting by address sends a token only with ``RAY_AUTH_MODE=token``, even
    when the token file exists; this sets it when the file exists and the mode is unset.

    Only before Ray's import, which reads the mode: afterwards the setting would not reach this
    process's driver, only the processes it starts later (a local Ray's GCS then wanted a token
    that this driver never sends: "Failed to start GCS ... InvalidAuthToken", in a process that
    had used a local Ray, then tried an address, then started a local Ray again).
    """
    if "RAY_AUTH_MODE" in os.environ or "ray" in sys.modules:
        return
    default = os.path.expanduser(os.path.join("~", ".ray", "auth_token"))
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or default
    if os.environ.get("RAY_AUTH_TOKEN") or os.path.exists(path):
        os.environ["RAY_AUTH_MODE"] = "token"


def make_ray_collector(mode: str, env: Any, policy: Any, frames_per_batch: int, total_frames: int,
                       workers: int, init_random_frames: int, explore: bool, seed: int, device: str,
                       address: str | None, rollouts_per_batch: int, timeout_s: float) -> RayCollector:
    """The ``backend=ray`` branch of the registered ``multi_sync``/``multi_async`` collectors."""
    env_fn = getattr(env, "factory", None)
    if env_fn is None:
        raise ConfigError(f"{type(env).__name__} cannot be rebuilt in a Ray actor (no .factory)",
                          key="env.name", fix="use a GymVecEnv-based env (env=gym or env=atari)")
    return RayCollector(env_fn, policy.actor, frames_per_batch, total_frames, workers, mode,
                        "explore" if explore else "act", init_random_frames, seed, device,
                        address, rollouts_per_batch, timeout_s)


BACKENDS["ray"] = RemoteBackend(make_ray_collector, check_address)
