"""A run's checkpoints: ``checkpoint.pt`` (``CheckpointWriter``), ``checkpoints/`` (``keep_last``) and
``best/`` (``save_best``), each written atomically."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlrun.core import checkpoint
from rlrun.core.rundir import read_tracking, write_tracking
from rlrun.distributed import checkpoint as rank_checkpoint
from rlrun.lifecycle.load import write_policy_file
from rlrun.loggers import pause_point
from rlrun.loggers.tracking import say

CHECKPOINT = "checkpoint.pt"


class CheckpointWriter:
    """Writes ``checkpoint.pt`` atomically: the trainer's state (``Trainer.state_dict``), the
    tracker run it continues and the resolved config; then lets the logger send what it covers.

    Args:
        cfg: The resolved run config (saved, and ``checkpoint.buffer``/``max_buffer_mb``).
        run_dir: Where ``checkpoint.pt`` goes.
        config_text: ``cfg`` as resolved YAML (made here if not given).
        tracking: What ``tracking.json`` holds for this run (tracker run id, attempt id, config hash).
    """

    def __init__(self, cfg: DictConfig, run_dir: Path, config_text: str | None = None,
                 tracking: dict[str, Any] | None = None):
        self.cfg, self.path = cfg, run_dir / CHECKPOINT
        self.config_text = config_text if config_text is not None else OmegaConf.to_yaml(cfg, resolve=True)
        self.warned = False
        self.tracking = tracking  # what tracking.json holds once the tracker opens (run_id updated)

    def note_run_id(self, run_id: str | None) -> None:
        """Adds the tracker run's id to ``tracking.json`` once it is known (the tracker may make its
        run while training starts); W&B's id, which its logger adds there, is kept."""
        if self.tracking is not None and run_id is not None and self.tracking["run_id"] != run_id:
            self.tracking["run_id"] = run_id
            write_tracking(self.path.parent, {**read_tracking(self.path.parent), **self.tracking})

    def save(self, trainer: Any) -> None:
        """Saves ``trainer``'s state (the checkpoint hook passes the trainer that calls it)."""
        cfg = self.cfg
        # the batch's metrics are logged before its checkpoint, so that a checkpoint at step S
        # covers S's metrics: a run resumed from it neither lacks nor repeats them
        trainer.flush_metrics()
        written = trainer.buffer.saved_nbytes() if trainer.buffer is not None else 0
        keep_buffer = cfg.checkpoint.buffer is True or (
            cfg.checkpoint.buffer == "auto" and written <= cfg.checkpoint.max_buffer_mb * 2**20)
        if not keep_buffer and written and not self.warned:
            self.warned = True
            say(f"[rlrun] checkpoints leave out the replay buffer ({written / 2**20:.0f} MB > "
                  f"checkpoint.max_buffer_mb={cfg.checkpoint.max_buffer_mb}, checkpoint.buffer="
                  f"{cfg.checkpoint.buffer}): a resumed run starts with an empty buffer")
        pause_point("checkpoint_write")
        logger = trainer.logger
        run_id = logger.run_id if logger is not None else None
        self.note_run_id(run_id)  # before the checkpoint, which then never names a run tracking.json lacks
        rank_checkpoint.save({**trainer.state_dict(keep_buffer=keep_buffer), "mlflow_run_id": run_id,
                              "config": self.config_text}, self.path)  # alone: checkpoint.save
        pause_point("checkpoint_commit")
        self.rotate(trainer.frames)
        if logger is not None:
            logger.commit(trainer.clock)  # the journal sends what the checkpoint covers

    def rotate(self, frames: int) -> None:
        """With ``checkpoint.keep_last=N > 1``, copies ``checkpoint.pt`` to
        ``checkpoints/<frames>.pt`` (atomically) and removes all but the newest N there."""
        keep = int(self.cfg.checkpoint.get("keep_last", 1))
        if keep <= 1:
            return
        folder = self.path.parent / KEPT
        folder.mkdir(exist_ok=True)
        with open(self.path, "rb") as src:
            checkpoint.atomic_write(folder / f"{int(frames):012d}.pt", lambda f: shutil.copyfileobj(src, f))
        for old in sorted(folder.glob("*.pt"))[:-keep]:  # zero-padded names sort by frame
            old.unlink(missing_ok=True)


BEST = "best"


def save_best(run_dir: Path, cfg: DictConfig, policy: Any, frames: int, metrics: dict[str, float],
              config_text: str) -> None:
    """Writes ``<run_dir>/best/``: ``policy.pt`` (what ``rlrun eval``/``export``/``rlrun.load`` read)
    and ``eval.json`` (the evaluation that made it the best), each atomically; ``eval.json`` last,
    so that one that names a frame always sits beside that frame's policy."""
    folder = run_dir / BEST
    folder.mkdir(exist_ok=True)
    write_policy_file(folder, cfg, policy, frames, config_text=config_text)
    pause_point("best_write")  # the kill tests' point between the two files
    kept = {k: v for k, v in metrics.items() if not k.startswith("eval/time")}  # wall time: not the result
    write_json(folder / "eval.json", {"frames": int(frames), **kept})


KEPT = "checkpoints"


def write_json(path: Path, data: dict) -> None:
    checkpoint.atomic_write_text(path, json.dumps(data, indent=2, default=str))
