"""A rank's run counted in the world's frames, its episodes gathered from every rank (issue 39):
two gloo ranks whose collectors finish different episodes."""

from __future__ import annotations

import multiprocessing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rlrun.distributed.ranked import WorldCollector, one_run
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
        torch.save({"frames": run.collector.frames, "budget": run.budget.total, "starts": run.learning_starts,
                    "returns": stats[0], "lengths": stats[1], "state": run.collector.state_dict()},
                   Path(out) / f"{rank}.pt")
    finally:
        dist.destroy_process_group()


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


def test_alone_the_run_is_unchanged():
    run = _Run(_Collector(0), Budget("frames", 512), 8)
    assert one_run(run) is run
    assert WorldCollector(_Collector(0), 2).total_frames == 1024
