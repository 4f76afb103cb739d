"""Replay buffers over TensorDicts: circular storage (RAM or memmap) and samplers."""

from rlrun.buffers.replay import SAMPLERS, ReplayBuffer
from rlrun.buffers.samplers import (
    PrioritizedSampler,
    Sampler,
    UniformSampler,
    WithoutReplacementSampler,
)
from rlrun.buffers.storage import BACKENDS, TensorStorage

__all__ = [
    "BACKENDS",
    "SAMPLERS",
    "PrioritizedSampler",
    "ReplayBuffer",
    "Sampler",
    "TensorStorage",
    "UniformSampler",
    "WithoutReplacementSampler",
]
