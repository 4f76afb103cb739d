"""Reads every stateful component of a built run, for the resume-equivalence tests.

``component_states`` is the one place that knows where each component keeps its
state in a built run (the policy's networks and normaliser are submodules of the
loss, ``trainer.loss.policy``; its exploration component, if any, is
``trainer.policy.exploration``).
``checkpoint_states`` reads the same components from a checkpoint file.

``ProbeTrainer`` replaces ``rlrun.lifecycle.build.Trainer`` so that a test can reach the
components ``rlrun.lifecycle.run.train`` builds: it records the trainer, snapshots the
components when training starts (after any restore), at a given frame, and at
each checkpoint save, and can stop the run at a given frame as a signal would.

Run as a script (``python tests/helpers/resume_utils.py CONFIG RUN_DIR OUT``), it
rebuilds and restores the run in this fresh process and writes the snapshot
taken before the first batch to ``OUT``.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf, open_dict

from rlrun.core import checkpoint
from rlrun.trainer.hooks import Hook
from rlrun.trainer.loop import Trainer

# The hooks whose points the trainer calls at intervals (``Hook.every``): ProbeTrainer records when.
FILTERED = (("evaluation", "post_steps_log"), ("checkpoint", "post_steps_log"),
            ("target_update", "post_optim"))

# Wall-clock fields: they round-trip through a checkpoint exactly but differ between two runs.
TIMING_KEYS = ("seconds", "eval/time_total_s")


def _lrs(optimizer_state: dict) -> dict[str, list[float]]:
    return {g: [pg["lr"] for pg in s["param_groups"]] for g, s in optimizer_state.items()}


def _split_buffer(state: dict | None) -> tuple[Any, Any]:
    if state is None:
        return None, None
    return {"storage": state["storage"], "generator": state["generator"]}, state["sampler"]


def component_states(trainer: Trainer) -> dict[str, Any]:
    """The state of every component of a built run, keyed by component.

    Keys: ``models`` (the loss's state: the policy's networks and normaliser, target networks,
    temperature, loss counters), ``exploration`` (the policy's exploration schedule and noise,
    when it has an exploration component),
    ``optimizer`` (per-parameter moments and steps), ``lr`` (each param group's
    current learning rate), ``rng`` (torch, numpy, python), ``buffer`` (stored rows,
    cursor and sampling generator), ``priorities`` (the sampler's state: sum- and
    min-trees for prioritized replay), ``collector`` (frames, trajectory counter,
    random-action generator), ``counters`` (optimiser steps, batches) and
    ``hook:<name>`` for every hook with state.
    """
    opt = trainer.optimizer.state_dict()
    buffer, priorities = _split_buffer(trainer.buffer.state_dict() if trainer.buffer is not None else None)
    out = {
        "models": _clone(trainer.loss.state_dict()),
        "optimizer": _clone({g: s["state"] for g, s in opt.items()}),
        "lr": _lrs(opt),
        "rng": _clone(checkpoint.rng_state()),
        "buffer": _clone(buffer),
        "priorities": _clone(priorities),
        "collector": _clone(trainer.collector.state_dict()),
        "counters": {"optim_steps": trainer.optim_steps, "batches": trainer.batches},
    }
    if trainer.policy.exploration is not None:
        out["exploration"] = _clone(trainer.policy.exploration.state_dict())
    for name, hook in trainer.hooks.items():
        if name.startswith("probe"):
            continue
        state = hook.state_dict()
        if state:
            out[f"hook:{name}"] = _clone(state)
    return out


def checkpoint_states(state: dict) -> dict[str, Any]:
    """The components of ``component_states`` as a checkpoint file holds them."""
    buffer, priorities = _split_buffer(state["buffer"])
    out = {
        "models": state["loss"],
        "optimizer": {g: s["state"] for g, s in state["optimizer"].items()},
        "lr": _lrs(state["optimizer"]),
        "rng": state["rng"],
        "buffer": buffer,
        "priorities": priorities,
        "collector": state["collector"],
        "counters": {"optim_steps": state["optim_steps"], "batches": state["batches"]},
    }
    if state["exploration"] is not None:
        out["exploration"] = state["exploration"]
    out.update({f"hook:{k}": v for k, v in state["hooks"].items() if v and not k.startswith("probe")})
    return out


def _clone(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(v) for v in x)
    return x


def differences(a: Any, b: Any, path: str = "", ignore: tuple[str, ...] = ()) -> list[str]:
    """Paths where ``a`` and ``b`` differ (tensors bit for bit, with dtype and shape)."""
    if path.rsplit(".", 1)[-1] in ignore:
        return []
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return [f"{path}: {type(a).__name__} vs {type(b).__name__}"]
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
            return [f"{path}: tensors differ ({a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)})"]
        return []
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(map(str, set(a) ^ set(b)))} in one only"]
        return [d for k in a for d in differences(a[k], b[k], f"{path}.{k}", ignore)]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{path}: lengths {len(a)} vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]", ignore)]
    if type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return [f"{path}: {a!r} vs {b!r}"]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


class _Probe(Hook):
    """Snapshots the components once the run reaches ``snapshot_at`` frames; stops at ``stop_at``."""

    def __init__(self, owner: ProbeTrainer):
        self.owner = owner

    def post_steps_log(self, trainer, batch) -> None:
        if self.owner.snapshot_at is not None and trainer.frames == self.owner.snapshot_at:
            self.owner.snapshots["at"] = component_states(trainer)
        if self.owner.stop_at is not None and trainer.frames >= self.owner.stop_at:
            trainer.request_stop("probe: simulated signal")  # what SIGTERM's handler does


class ProbeTrainer(Trainer):
    """A ``Trainer`` that records itself and snapshots its components (see the module doc).

    Set the class attributes before ``rlrun.lifecycle.run.train`` builds it; ``reset()`` clears them.
    """

    last: ProbeTrainer | None = None
    stop_at: int | None = None
    snapshot_at: int | None = None
    train_at_all = True
    snapshots: dict[str, Any] = {}

    @classmethod
    def reset(cls, stop_at: int | None = None, snapshot_at: int | None = None,
              train_at_all: bool = True) -> None:
        cls.last, cls.stop_at, cls.snapshot_at, cls.train_at_all = None, stop_at, snapshot_at, train_at_all
        cls.snapshots = {}

    def __init__(self, collector, loss, optimizer, hooks, *args, **kwargs):
        hooks["probe"] = _Probe(self)  # last, so that it sees every other hook's work on a batch
        self.fired: list[tuple[str, int, int]] = []
        for name, point in FILTERED:
            if name in hooks:
                self._record(hooks[name], name, point)
        super().__init__(collector, loss, optimizer, hooks, *args, **kwargs)
        type(self).last = self

    def _record(self, hook: Hook, name: str, point: str) -> None:
        """Appends ``(hook, frames, optimiser steps)`` to ``fired`` whenever the dispatch calls ``point``."""
        method = getattr(hook, point)

        def recorded(trainer, *args):
            self.fired.append((name, trainer.frames, trainer.optim_steps))
            return method(trainer, *args)

        setattr(hook, point, recorded)  # an instance attribute: the trainer's dispatch finds it

    def train(self) -> None:
        self.snapshots["start"] = component_states(self)
        if self.train_at_all:
            super().train()


def install(monkeypatch, saves: list[dict] | None = None) -> None:
    """Routes ``rlrun.lifecycle.build`` through ``ProbeTrainer``; each checkpoint save appends a snapshot
    to ``saves``."""
    import rlrun.lifecycle.build

    monkeypatch.setattr(rlrun.lifecycle.build, "Trainer", ProbeTrainer)
    if saves is not None:
        original = checkpoint.save

        def save(state, path):
            original(state, path)
            saves.append(component_states(ProbeTrainer.last))

        monkeypatch.setattr(checkpoint, "save", save)


def composed(*overrides: str):
    """The resolved run config for ``overrides``, as the ``rlrun`` command composes it."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    from rlrun.lifecycle.compose import CONF_DIR, register_resolvers

    register_resolvers()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    OmegaConf.resolve(cfg)
    return cfg


def scramble_global_rngs(seed: int = 12345) -> None:
    """Puts the global RNGs somewhere no run would leave them, as a fresh process would."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def _main(config: str, run_dir: str, out: str) -> None:
    from rlrun.lifecycle import build, run

    ProbeTrainer.reset(train_at_all=False)
    build.Trainer = ProbeTrainer
    run.train(OmegaConf.load(config), Path(run_dir))
    torch.save(ProbeTrainer.snapshots["start"], out)


if __name__ == "__main__":
    _main(*sys.argv[1:4])
