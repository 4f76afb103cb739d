"""One checkpoint of a data-parallel run, written atomically by every rank (issue 39).

Layout (``launch.rank_dir``): rank 0's ``<run dir>/checkpoint.pt`` holds the shared state once
(policy, loss, optimiser: every rank holds the same after every step) with rank 0's own; rank
r > 0's ``<run dir>/ranks/<r>/checkpoint.pt`` holds only its own (counters, collector and env
states, replay shard, exploration, hooks, RNG) and the world size. ``<run dir>/world.json`` is
the manifest: the world size and the frame of the last checkpoint all ranks completed.

A save is one commit over all ranks:

1. every rank writes its part to ``checkpoint.pending-<frames>.pt`` beside its last one;
2. a barrier: all parts are on disk (a rank that died leaves the others failing here);
3. rank 0 writes the manifest naming ``<frames>`` (atomic replace): the checkpoint counts from
   this moment, and only from it;
4. a barrier, then every rank moves its pending part over its ``checkpoint.pt``.

A kill before 3 leaves every ``checkpoint.pt`` at the previous commit (pending parts are
deleted at the next start); a kill after 3 leaves some parts pending, which the next start
moves in place (``recover``), so every rank resumes from the same batch. Alone (no process
group) ``save``/``load`` are ``rlrun.core.checkpoint``'s.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch.distributed as dist

from rlrun.core import checkpoint, saved
from rlrun.core.errors import CheckpointError
from rlrun.distributed.sync import active

MANIFEST = "world.json"
CHECKPOINT = "checkpoint.pt"
SHARED = ("policy", "loss", "optimizer")  # the same on every rank: held once, in rank 0's part
_PENDING = re.compile(r"checkpoint\.pending-(\d+)\.pt")


def save(state: dict[str, Any], path: Path) -> None:
    """Saves this rank's part of ``state`` at ``path`` as one commit of all ranks (see above)."""
    if not active():
        checkpoint.save(state, path)
        return
    rank, size = dist.get_rank(), dist.get_world_size()
    frames = int(state["frames"])
    part = state if rank == 0 else {k: v for k, v in state.items() if k not in SHARED}
    pending = path.with_name(f"checkpoint.pending-{frames}.pt")
    checkpoint.save({**part, "world_size": size, "rank": rank}, pending)
    dist.barrier()
    if rank == 0:
        write_manifest(path.parent, size, frames)
    dist.barrier()  # no part replaces its last one before the commit exists
    os.replace(pending, path)


def load(path: Path) -> dict[str, Any]:
    """This rank's checkpoint: its own part with the shared state from rank 0's (broadcast).

    Every rank calls it (a collective); a rank whose part is unreadable or from another commit
    makes every rank fail with one line naming it.
    """
    if not active():
        return checkpoint.load(path)
    rank = dist.get_rank()
    own: dict[str, Any] | None = None
    problem = ""
    try:
        own = checkpoint.load(path)
        committed = read_manifest(_root(path.parent, rank)).get("frames")
        if own.get("world_size") != dist.get_world_size() or own.get("frames") != committed:
            problem = (f"rank {rank}'s {path} is from frame {own.get('frames')} of a "
                       f"{own.get('world_size')}-rank run, the last commit is frame {committed}")
    except CheckpointError as err:
        problem = err.message
    problems: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(problems, problem)
    bad = [(r, p) for r, p in enumerate(problems) if p]
    if bad:
        raise CheckpointError(bad[0][1], key="resume", fix="start afresh with resume=false (the ranks' "
                              "parts do not make one checkpoint)")
    assert own is not None
    shared = [{k: own[k] for k in SHARED if k in own} if rank == 0 else None]
    dist.broadcast_object_list(shared, src=0)
    return {**own, **shared[0]}


def recover(rank_dir: Path, root: Path) -> None:
    """Completes or discards a save a kill interrupted, in this rank's directory: the pending part
    of the committed frame is moved in place, any other pending part deleted."""
    committed = read_manifest(root).get("frames")
    for pending in rank_dir.glob("checkpoint.pending-*.pt"):
        match = _PENDING.fullmatch(pending.name)
        if match and committed is not None and int(match.group(1)) == committed:
            os.replace(pending, rank_dir / CHECKPOINT)
        else:
            pending.unlink(missing_ok=True)


def read_manifest(root: Path) -> dict[str, Any]:
    """``world.json``: ``world_size`` and the committed ``frames`` (None: no checkpoint yet)."""
    try:
        data = saved.load_json(root / MANIFEST)
    except saved.SavedFileError:
        return {}
    return data if isinstance(data, dict) else {}


def write_manifest(root: Path, size: int, frames: int | None) -> None:
    """Writes the manifest atomically (rank 0): the commit point of a checkpoint."""
    root.mkdir(parents=True, exist_ok=True)
    checkpoint.atomic_write_text(root / MANIFEST, json.dumps({"world_size": size, "frames": frames}))


def _root(rank_dir: Path, rank: int) -> Path:
    """The run directory from a rank's directory (``<run dir>/ranks/<r>`` for r > 0)."""
    return rank_dir if rank == 0 else rank_dir.parent.parent
