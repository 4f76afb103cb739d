"""Registers the replay buffer as a component."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch

from rlrun.buffers.replay import SAMPLERS, ReplayBuffer
from rlrun.errors import ConfigError
from rlrun.registry import Fraction, NonNegativeFloat, PositiveInt, register


@register("buffer", "replay")
def make_replay_buffer(capacity: PositiveInt | None, batch_size: PositiveInt,
                       sampler: Literal["uniform", "without_replacement", "prioritized"] = "uniform",
                       storage: Literal["ram", "memmap"] = "ram", scratch_dir: str | None = None,
                       alpha: NonNegativeFloat = 0.6, beta: Fraction = 0.4, device: str = "cpu",
                       seed: int = 0,
                       run_dir: Path | None = None) -> ReplayBuffer:
    """Replay buffer in RAM or on disk (memmap): uniform, without-replacement or prioritized.

    ``capacity: null`` is for on-policy minibatches: the builder sets it to one collected batch.
    """
    if capacity is None:
        raise ConfigError("needs a capacity", key="buffer.capacity", fix="set buffer.capacity, e.g. 1000000")
    if capacity <= 0 or batch_size <= 0:
        key = "buffer.capacity" if capacity <= 0 else "buffer.batch_size"
        raise ConfigError("must be a positive integer", key=key, fix=f"set {key} to e.g. 1000000")
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
