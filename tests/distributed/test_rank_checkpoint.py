"""One checkpoint of a data-parallel run (issue 39): the shared state once, each rank's own part
beside it, committed by the manifest; a save a kill interrupted is completed or discarded as the
manifest says, so every rank resumes from the same batch."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from rlrun.core import checkpoint
from rlrun.core.errors import CheckpointError
from rlrun.distributed import checkpoint as parts


def _state(frames: int, rank: int) -> dict:
    return {"frames": frames, "optim_steps": frames // 8, "policy": {"w": torch.full((3,), float(frames))},
            "loss": {"w": torch.zeros(3)}, "optimizer": {"step": frames}, "collector": {"rank": rank},
            "rng": {"seed": rank}}


def _rank(rank: int, rendezvous: str, root: str, mode: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    own = Path(root) if rank == 0 else Path(root) / "ranks" / str(rank)
    own.mkdir(parents=True, exist_ok=True)
    try:
        if mode == "save":
            parts.save(_state(64, rank), own / "checkpoint.pt")
            parts.save(_state(128, rank), own / "checkpoint.pt")
        loaded = parts.load(own / "checkpoint.pt")
        torch.save({"frames": loaded["frames"], "policy": loaded["policy"], "collector": loaded["collector"]},
                   Path(root) / f"loaded{rank}.pt")
    except CheckpointError as err:
        (Path(root) / f"error{rank}.txt").write_text(err.message)
    finally:
        dist.destroy_process_group()


def _ranks(tmp_path: Path, mode: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    rdv = tmp_path / f"rdv-{mode}"
    procs = [ctx.Process(target=_rank, args=(r, str(rdv), str(tmp_path / "run"), mode)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]


@pytest.fixture
def saved_run(tmp_path):
    _ranks(tmp_path, "save")
    return tmp_path / "run"


def test_the_shared_state_once_each_ranks_part_beside_it(saved_run):
    assert json.loads((saved_run / "world.json").read_text()) == {"world_size": 2, "frames": 128}
    zero = torch.load(saved_run / "checkpoint.pt", weights_only=True)
    one = torch.load(saved_run / "ranks" / "1" / "checkpoint.pt", weights_only=True)
    assert zero["policy"]["w"][0] == 128 and "policy" not in one and "optimizer" not in one
    assert (zero["world_size"], one["world_size"], one["collector"]) == (2, 2, {"rank": 1})
    assert not list(saved_run.glob("**/checkpoint.pending-*"))
    for r in range(2):  # each rank resumes its own part with the shared state of rank 0's
        got = torch.load(saved_run / f"loaded{r}.pt", weights_only=True)
        assert got["frames"] == 128 and got["policy"]["w"][0] == 128 and got["collector"] == {"rank": r}


def _pending(run: Path, rank: int, frames: int) -> None:
    own = run if rank == 0 else run / "ranks" / str(rank)
    checkpoint.save({**_state(frames, rank), "world_size": 2, "rank": rank},
                    own / f"checkpoint.pending-{frames}.pt")


def test_a_save_killed_before_its_commit_is_discarded(saved_run, tmp_path):
    _pending(saved_run, 1, 192)  # rank 1 wrote its next part, rank 0 died before the manifest
    for rank_dir in (saved_run, saved_run / "ranks" / "1"):
        parts.recover(rank_dir, saved_run)
    assert not list(saved_run.glob("**/checkpoint.pending-*"))
    assert torch.load(saved_run / "ranks" / "1" / "checkpoint.pt", weights_only=True)["frames"] == 128


def test_a_save_killed_after_its_commit_is_completed(saved_run, tmp_path):
    # the manifest names 192: rank 0 moved its part in place, rank 1 was killed before it did
    _pending(saved_run, 0, 192)
    (saved_run / "checkpoint.pending-192.pt").replace(saved_run / "checkpoint.pt")
    _pending(saved_run, 1, 192)
    parts.write_manifest(saved_run, 2, 192)
    for rank_dir in (saved_run, saved_run / "ranks" / "1"):
        parts.recover(rank_dir, saved_run)
    assert torch.load(saved_run / "ranks" / "1" / "checkpoint.pt", weights_only=True)["frames"] == 192


def test_parts_of_different_commits_are_refused_on_every_rank(saved_run, tmp_path):
    parts.write_manifest(saved_run, 2, 192)  # rank 1's part (128) is not the committed one
    _pending(saved_run, 0, 192)
    (saved_run / "checkpoint.pending-192.pt").replace(saved_run / "checkpoint.pt")
    _ranks(tmp_path, "load")
    errors = [(saved_run / f"error{r}.txt").read_text() for r in range(2)]
    assert errors[0] == errors[1] and "rank 1's" in errors[0] and "last commit is frame 192" in errors[0]
