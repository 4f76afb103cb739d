"""Registers the replay buffer as a component."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch

from rlrun.buffers.replay import SAMPLERS, ReplayBuffer
from rlrun.core.errors import ConfigError
from rlrun.core.registry import Fraction, NonNegativeFloat, PositiveInt, register


@register("buffer", "replay")
def make_replay_buffer(capacity: PositiveInt | None, batch_size: PositiveInt,
                       sampler: Literal["uniform", "without_replacement", "prioritized"] = "uniform",
                       storage: Literal["ram", "memmap"] = "ram", scratch_dir: str | None = None,
                       alpha: NonNegativeFloat = 0.6, beta: Fraction = 0.4, device: str = "cpu",
                       seed: int = 0,
                       run_dir: Path | None = None) -> ReplayBuffer:
    """Replay buffer in RAM or on disk (memmap): uniform, without-replacement or prioritized.

    ``capacity: null`` is for on-policy minibatches. The capacity is checked in one place: its
    range by the annotation (the registry), the rest by ``rlrun.lifecycle.build`` (on-policy: one collected
    batch, set there; off-policy: required, at least one batch).
    """
    if sampler not in SAMPLERS:
        raise ConfigError(f"unknown sampler {sampler!r}", key="buffer.sampler",
                          fix=f"use one of {', '.join(SAMPLERS)}")
    if storage not in ("ram", "memmap"):
        raise ConfigError(f"unknown storage {storage!r}", key="buffer.storage",
                          fix="use ram or memmap")
    if storage == "memmap" and scratch_dir is None and run_dir is not None:
        scratch_dir = str(Path(run_dir) / "buffer")
    gen = torch.Generator().manual_seed(seed + 1)
    return ReplayBuffer(capacity, batch_size, sampler=sampler, storage=storage,
                        scratch_dir=scratch_dir, alpha=alpha, beta=beta, device=device,
                        generator=gen)
