"""One run seen once: a rank's built run counted in the whole world's frames (issue 39).

Each rank collects its share (``launch.rank_config``: ``frames_per_batch / N`` a batch), and
every rank collects the same number of batches (their gradient all-reduces pair up one for one),
so after every batch the world has collected exactly ``N`` times a rank's frames. ``one_run``
wraps the rank's collector so that the trainer's clock, budget, intervals (checkpoint,
evaluation), checkpoints and logged ``frames``/steps count the world's frames, as one process
on the whole batch counts them; and its episode statistics are every rank's, gathered, so that
``train/episode_return`` (and the progress line's return) averages all ranks' episodes and
``time/fps`` is the world's frames over rank 0's wall time. Rank 0 alone logs them (the other
ranks run ``logger=none``), once per (metric, step).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import torch.distributed as dist

from rlrun.distributed.sync import active


class WorldCollector:
    """A rank's collector counted in the world's frames, its episodes gathered from every rank.

    Everything else (iteration, weights pushes, state, shutdown) is the rank's own collector's:
    its state holds the rank's own frames, env states and RNG.
    """

    def __init__(self, inner: Any, size: int):
        self.inner, self.size = inner, size

    def __getattr__(self, name: str) -> Any:  # only for what this class does not define
        return getattr(self.inner, name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.inner)

    @property
    def frames(self) -> int:
        """The world's frames: every rank has collected as many as this one."""
        return self.inner.frames * self.size

    @property
    def total_frames(self) -> int:
        return self.inner.total_frames * self.size

    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        """Every rank's finished episodes since the last call, in rank order (a collective: each
        rank's metrics hook calls it once per batch)."""
        returns, lengths = self.inner.pop_episode_stats()
        gathered: list[Any] = [None] * self.size
        dist.all_gather_object(gathered, (list(returns), list(lengths)))
        return ([float(r) for part in gathered for r in part[0]],
                [int(n) for part in gathered for n in part[1]])

    def state_dict(self) -> dict:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.inner.load_state_dict(state)


def one_run(run: Any) -> Any:
    """``run`` (``rlrun.lifecycle.build.Run``) counted in the world's frames; unchanged alone or
    for a budget in updates (offline runs are refused under several ranks)."""
    if not active() or run.budget.unit != "frames":
        return run
    size = dist.get_world_size()
    return dataclasses.replace(run, collector=WorldCollector(run.collector, size),
                               budget=dataclasses.replace(run.budget, total=run.budget.total * size),
                               learning_starts=run.learning_starts * size)
