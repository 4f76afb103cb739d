"""A rank's run counted in the world's frames, its episodes gathered from every rank, one
observation normaliser over every rank's batches (issue 39): two gloo ranks whose collectors
finish different episodes and see different observations."""

from __future__ import annotations

import multiprocessing
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tensordict import TensorDict

from rlrun.distributed.ranked import WorldCollector, one_run
from rlrun.modules.networks import ObservationNormalizer
from rlrun.trainer.hooks import ObservationStats
from rlrun.trainer.loop import Budget


@dataclass
class _Run:  # the fields of rlrun.lifecycle.build.Run that one_run reads
    collector: Any
    budget: Budget
    learning_starts: int


class _Collector:
    def __init__(self, rank: int):
        self.frames, self.total_frames, self.rank = 64, 512, rank

    def pop_episode_stats(self):
        return ([10.0 * (self.rank + 1)] * (self.rank + 1), [5] * (self.rank + 1))

    def state_dict(self):
        return {"frames": self.frames}


def _rank(rank: int, rendezvous: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    try:
        run = one_run(_Run(_Collector(rank), Budget("frames", 512), 8))
        stats = run.collector.pop_episode_stats()
        norm = _normalised(_observations(rank))
        torch.save({"mean": norm.mean, "var": norm.var, "count": norm.count,
                    "frames": run.collector.frames, "budget": run.budget.total, "starts": run.learning_starts,
                    "returns": stats[0], "lengths": stats[1], "state": run.collector.state_dict()},
                   Path(out) / f"{rank}.pt")
    finally:
        dist.destroy_process_group()


def _observations(rank: int) -> torch.Tensor:
    """Rank ``rank``'s batch of observations [steps, envs, 3]: each rank sees other states."""
    return torch.randn(16, 2, 3, generator=torch.Generator().manual_seed(rank)) * (rank + 1) + 5 * rank


def _normalised(*batches: torch.Tensor) -> ObservationNormalizer:
    """A normaliser after the observation_stats hook's update from each batch in turn."""
    norm, hook = ObservationNormalizer((3,)), ObservationStats()
    trainer = types.SimpleNamespace(policy=types.SimpleNamespace(normalizer=norm))
    for batch in batches:
        hook.process_batch(trainer, TensorDict({"observation": batch}, batch_size=batch.shape[:2]))
        hook.post_steps(trainer)
    return norm


def test_every_ranks_episodes_and_the_worlds_frames(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_rank, args=(r, str(tmp_path / "rdv"), str(tmp_path))) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    for r in range(2):
        got = torch.load(tmp_path / f"{r}.pt", weights_only=True)
        assert got["returns"] == [10.0, 20.0, 20.0] and got["lengths"] == [5, 5, 5]  # rank 1's included
        assert (got["frames"], got["budget"], got["starts"]) == (128, 1024, 16)
        assert got["state"] == {"frames": 64}  # the rank's own collector state
    # one observation normaliser on every rank: the one a process on both ranks' batches keeps
    alone = _normalised(torch.cat([_observations(0), _observations(1)]))
    ranks = [torch.load(tmp_path / f"{r}.pt", weights_only=True) for r in range(2)]
    for key in ("mean", "var", "count"):
        assert torch.equal(ranks[0][key], ranks[1][key])
        assert torch.allclose(ranks[0][key], getattr(alone, key), atol=1e-6, rtol=1e-6)
    assert not torch.allclose(_normalised(_observations(0)).mean, alone.mean)  # one rank's alone differs


def test_alone_the_run_is_unchanged():
    run = _Run(_Collector(0), Budget("frames", 512), 8)
    assert one_run(run) is run
    assert WorldCollector(_Collector(0), 2).total_frames == 1024
