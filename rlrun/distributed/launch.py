"""A run's config and directory on one rank of a data-parallel learner (issue 39).

``joined(cfg, run_dir)`` is what the command wraps a run in: alone (no torchrun/SLURM world) it
changes nothing; on a rank it joins the process group and gives back this rank's config and
directory:

- the collector's budget (``total_frames``), its ``frames_per_batch`` and the loss's batch
  (``buffer.batch_size``) are divided by the world size and the off-policy update rate
  (``trainer.updates_per_frame``) multiplied by it, so N ranks together collect and learn from
  what one process would, with its number of updates (N ranks on 1/N of a batch compute one
  process's step);
- ``seed`` gets a rank offset (``rank_seed``): each rank's envs, exploration and sampling differ;
- rank 0 owns the run's face: the run directory (broadcast, so every rank agrees), the tracker,
  the progress line, evaluation, and the shared checkpoint; rank r > 0 keeps its own part (its
  collector, envs, replay shard, RNG) in ``<run dir>/ranks/<r>`` with ``logger=none``;
- ``<run dir>/world.json`` records the world size and the last checkpoint all ranks committed
  (``rlrun.distributed.checkpoint``); a resume with another world size is refused.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf, open_dict

from rlrun.core.errors import RlrunError
from rlrun.distributed.checkpoint import CHECKPOINT, MANIFEST, read_manifest, recover, write_manifest
from rlrun.distributed.world import World, WorldError, rank_seed, shard, start, stop, world_from_env

_REFUSAL_GRACE_S = 10.0


@contextmanager
def joined(cfg: DictConfig, run_dir: Path) -> Iterator[tuple[DictConfig, Path, World | None]]:
    """This rank's ``(cfg, run_dir, world)``; unchanged (world None) outside a torchrun/SLURM world."""
    device = str(cfg.get("device") or "auto")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        world = world_from_env(device, _env())
        if world is not None:
            refuse_unshardable(cfg)
            ranked = rank_config(cfg, world)  # shares that do not divide: refused before the group starts
            start(world, float(os.environ.get("RLRUN_COLLECTIVE_TIMEOUT_S", "120")))
    except RlrunError as err:
        _refuse_once(err)
    if world is None:
        yield cfg, run_dir, None
        return
    try:
        try:
            shared = [str(run_dir)]
            dist.broadcast_object_list(shared, src=0)  # Hydra's run dir as rank 0 named it
            run_dir = Path(shared[0])
            resume = cfg.get("resume")
            check_world_file(run_dir, world.size, resume)  # every rank alike: all refuse, or none
            own = rank_dir(run_dir, world)
            fresh = resume in (False, "false", "never") or not (run_dir / MANIFEST).is_file()
            if not fresh:
                recover(own, run_dir)  # a save a kill interrupted: completed or discarded, as committed
                _check_parts(own / CHECKPOINT)
            dist.barrier()  # every rank has read the manifest before rank 0 may write it
            if world.leader and fresh:
                write_manifest(run_dir, world.size, None)
        except RlrunError as err:
            _refuse_once(err)
        yield ranked, own, world
    finally:
        stop()


def _refuse_once(err: RlrunError) -> NoReturn:
    """A refusal every rank reaches alike (the same config, environment and files): rank 0 raises
    it, for the command's one line; the others exit with its code without repeating it (or are
    ended by the launcher once rank 0 has exited)."""
    if (_env().get("RANK") or "0") != "0":
        # rank 0 is saying it: outlive it, so that the launcher (torchrun ends the others when the
        # first rank exits) does not end rank 0 before its line is out
        time.sleep(_REFUSAL_GRACE_S)
        raise SystemExit(err.exit_code) from None
    raise err


def _env() -> dict[str, str]:
    return dict(os.environ)


def refuse_unshardable(cfg: DictConfig) -> None:
    """One line (exit 2) for what cannot run data-parallel here, and why."""
    collector = OmegaConf.select(cfg, "collector.name", default="") or ""
    if "async" in str(collector):
        raise WorldError("an asynchronous collector hands each rank a different number of batches "
                         "at different times, so ranks' gradient all-reduces would not pair up",
                         key="collector", fix="collector=multi_sync or sync under torchrun")
    if OmegaConf.select(cfg, "eval.target_return") is not None:
        raise WorldError("a target return stops rank 0 alone (evaluation runs there), leaving the "
                         "other ranks waiting in a collective", key="eval.target_return",
                         fix="eval.target_return=null")
    resume = cfg.get("resume")
    if resume not in (None, True, False, "auto", "true", "false", "never"):
        raise WorldError("each rank resumes its own part of a checkpoint from the run directory, and "
                         "another run's parts would repeat its ranks' env states and replay shards",
                         key="resume", fix="resume=auto (the same run directory) or resume=false")
    if cfg.get("dataset"):
        raise WorldError("offline runs are not sharded over ranks yet", key="dataset",
                         fix="run offline families in one process")


def rank_config(cfg: DictConfig, world: World) -> DictConfig:
    """The config rank ``world.rank`` runs: its share of budget and batches, its seed, its face."""
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    with open_dict(out):
        out.seed = rank_seed(int(cfg.seed), world.rank)
        if cfg.get("total_frames"):
            out.total_frames = shard(int(cfg.total_frames), world, "total_frames")
        if OmegaConf.select(cfg, "collector.frames_per_batch"):
            out.collector.frames_per_batch = shard(int(cfg.collector.frames_per_batch), world,
                                                   "collector.frames_per_batch")
        if OmegaConf.select(cfg, "collector.init_random_frames"):
            out.collector.init_random_frames = int(cfg.collector.init_random_frames) // world.size
        if OmegaConf.select(cfg, "trainer.learning_starts"):  # counted back in the world's frames (ranked)
            out.trainer.learning_starts = int(cfg.trainer.learning_starts) // world.size
        if OmegaConf.select(cfg, "exploration.annealing_frames"):  # a rank's exploration sees its frames
            out.exploration.annealing_frames = max(1, int(cfg.exploration.annealing_frames) // world.size)
        if OmegaConf.select(cfg, "trainer.updates_per_frame"):
            # a rank sees 1/N of the frames: N x the rate keeps one process's updates per global frame
            out.trainer.updates_per_frame = float(cfg.trainer.updates_per_frame) * world.size
        if OmegaConf.select(cfg, "buffer.batch_size"):
            out.buffer.batch_size = shard(int(cfg.buffer.batch_size), world, "buffer.batch_size")
        if not world.leader:
            out.logger = {"name": "none"}
            out.progress = False
            out.eval.interval_frames = 0
            out.eval.video = False
    return out


def rank_dir(run_dir: Path, world: World) -> Path:
    """Where rank ``world.rank``'s part of the run lives: rank 0's is the run directory."""
    return run_dir if world.leader else run_dir / "ranks" / str(world.rank)


def _check_parts(path: Path) -> None:
    """Every rank has its part of the checkpoint, or none has (a resume loads them together)."""
    have: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(have, path.is_file())
    if any(have) and not all(have):
        missing = [r for r, h in enumerate(have) if not h]
        raise WorldError(f"rank {missing[0]}'s part of the checkpoint is missing beside the others'",
                         key="resume", fix="start afresh with resume=false")


def check_world_file(run_dir: Path, size: int, resume: Any) -> None:
    """Refuses a resume under another world size than the run directory's."""
    if (run_dir / MANIFEST).is_file() and resume not in (False, "false", "never"):
        saved = read_manifest(run_dir).get("world_size")
        if saved != size:
            raise WorldError(f"the checkpoint in {run_dir} was trained on {saved} ranks, this run has {size} "
                             "(replay shards, env states and budget shares are per rank)",
                             key="nproc-per-node",
                             fix=f"rerun with {saved} ranks, or start afresh with resume=false")

