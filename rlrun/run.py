"""Builds a run from its resolved config and trains it, resuming if it can.

The run directory holds ``config.yaml`` (resolved), ``checkpoint.pt``,
``summary.json`` and, with ``logger=csv``, ``metrics.csv``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from rlrun import checkpoint
from rlrun.errors import CheckpointError, ConfigError
from rlrun.registry import build
from rlrun.tracking import Progress
from rlrun.trainer.evaluation import Evaluation, Evaluator
from rlrun.trainer.hooks import Hook, LinearLR, TrainStats
from rlrun.trainer.loop import Trainer

CHECKPOINT = "checkpoint.pt"


def _positive(cfg: DictConfig, key: str, allow_zero: bool = False) -> int:
    value = OmegaConf.select(cfg, key)
    ok = isinstance(value, int) and not isinstance(value, bool) and (value > 0 or
                                                                     (allow_zero and value == 0))
    if not ok:
        raise ConfigError(f"must be a {'non-negative' if allow_zero else 'positive'} integer, "
                          f"got {value!r}", key=key, fix=f"set {key} to e.g. 10000")
    return value


def validate(cfg: DictConfig) -> None:
    """Checks the budgets and their consistency before anything is built."""
    seed = cfg.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"must be an integer >= 0, got {seed!r}", key="seed", fix="e.g. seed=0")
    threads = cfg.get("threads")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise ConfigError(f"must be null or an integer >= 1, got {threads!r}", key="threads",
                          fix="e.g. threads=1")
    _positive(cfg, "total_frames")
    fpb = _positive(cfg, "collector.frames_per_batch")
    for key in ("trainer.epochs_per_batch", "eval.episodes"):
        _positive(cfg, key)
    for key in ("trainer.optim_steps_per_epoch", "trainer.learning_starts",
                "collector.init_random_frames", "eval.interval_frames",
                "checkpoint.interval_frames"):
        if OmegaConf.select(cfg, key) is not None:
            _positive(cfg, key, allow_zero=True)
    if cfg.get("buffer") is not None:
        capacity = _positive(cfg, "buffer.capacity")
        if capacity < fpb:
            raise ConfigError(f"the buffer ({capacity}) cannot hold one batch of {fpb} frames",
                              key="buffer.capacity",
                              fix=f"set buffer.capacity >= {fpb} or lower collector.frames_per_batch")
        batch = _positive(cfg, "buffer.batch_size")
        if cfg.buffer.get("sampler") == "without_replacement" and batch > capacity:
            raise ConfigError(f"minibatches of {batch} do not fit in the {capacity} frames of a batch",
                              key="buffer.batch_size",
                              fix=f"set buffer.batch_size <= {capacity} or raise collector.frames_per_batch")


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"unknown device {device!r}", key="device",
                          fix="use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("CUDA is not available here", key="device", fix="use device=cpu or auto")
    return dev


class Checkpointing(Hook):
    """Saves a checkpoint every ``interval_frames``; ``train`` saves once more when the loop ends."""

    def __init__(self, save, interval_frames: int):
        self.save, self.interval, self.next_at = save, interval_frames, interval_frames

    def post_steps_log(self, trainer, batch) -> None:
        if self.interval > 0 and trainer.frames >= self.next_at:
            # the loop's last batch is saved by train() right after the loop: not twice
            if trainer.frames < trainer.collector.total_frames and not trainer.stop_reason:
                self.save()
            while self.next_at <= trainer.frames:
                self.next_at += self.interval

    def state_dict(self) -> dict:
        return {"next_at": self.next_at}

    def load_state_dict(self, state: dict) -> None:
        self.next_at = int(state["next_at"])


class ProgressHook(Hook):
    def __init__(self, progress: Progress, stats: TrainStats):
        self.progress, self.stats = progress, stats

    def post_steps_log(self, trainer, batch) -> None:
        info = {}
        if self.stats.recent_returns:
            info["return"] = sum(self.stats.recent_returns) / len(self.stats.recent_returns)
        if "time/fps" in trainer._metrics:
            info["fps"] = trainer._metrics["time/fps"]
        if "eval/episode_return" in trainer._metrics:
            info["eval"] = trainer._metrics["eval/episode_return"]
        self.progress.update(trainer.frames, info)


def flatten(cfg: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _find_checkpoint(resume: Any, run_dir: Path) -> Path | None:
    if resume in (False, None, "false", "never"):
        return None
    if resume in (True, "auto"):
        path = run_dir / CHECKPOINT
        return path if path.exists() else None
    path = Path(str(resume))
    path = path / CHECKPOINT if path.is_dir() else path
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}", key="resume",
                              fix="give a run directory holding checkpoint.pt, or resume=auto")
    return path


def train(cfg: DictConfig, run_dir: Path, tags: dict[str, str] | None = None) -> dict[str, Any]:
    """Trains the configured run in ``run_dir`` and returns its summary.

    Args:
        cfg: The resolved run config.
        run_dir: Where checkpoints, config and summary go.
        tags: Set on a new tracking run (algo, env, sweep, job number, commit, ...).
    """
    validate(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    device = resolve_device(cfg.device)
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.threads))
    ckpt_path = _find_checkpoint(cfg.resume, run_dir)
    state = checkpoint.load(ckpt_path) if ckpt_path else None
    torch.manual_seed(cfg.seed)

    env = build("env", cfg.env)
    models = build("model", cfg.model, spec=env.spec).to(device)
    loss = build("loss", cfg.loss, models=models, spec=env.spec).to(device)
    optimizer = build("optim", cfg.optim, param_groups=loss.param_groups())
    exploration = build("exploration", cfg.exploration, actor=models.actor, spec=env.spec,
                        num_envs=env.num_envs) if cfg.get("exploration") else None
    collector = build("collector", cfg.collector, env=env, actor=models.actor, exploration=exploration,
                      total_frames=cfg.total_frames, seed=cfg.seed, device=str(device))
    buffer = build("buffer", cfg.buffer, seed=cfg.seed, device=str(device), run_dir=run_dir
                   ) if cfg.get("buffer") else None
    hooks: dict[str, Hook] = {name: build("hook", node, key=f"hooks.{name}")
                              for name, node in (cfg.get("hooks") or {}).items() if node}
    if exploration is not None:
        hooks["exploration"] = exploration  # saved and restored with the other hooks
    if optimizer.lr_schedule == "linear":
        hooks["linear_lr"] = LinearLR()
    stats = hooks["train_stats"] = TrainStats()
    eval_env = build("env", {**OmegaConf.to_container(cfg.env, resolve=True),
                             "num_envs": min(cfg.eval.episodes, cfg.eval.max_envs)}, key="env")
    evaluation = hooks["evaluation"] = Evaluation(
        Evaluator(eval_env, cfg.eval.episodes, seed=cfg.seed + 1_000_003, device=str(device)),
        cfg.eval.interval_frames, cfg.eval.get("target_return"))
    hooks["checkpoint"] = Checkpointing(lambda: save(), cfg.checkpoint.interval_frames)
    if state is not None:
        _restore(state, loss, optimizer, collector, buffer, hooks, ckpt_path)
        if collector.frames >= collector.total_frames and (run_dir / "summary.json").exists():
            print(f"[rlrun] {run_dir} already finished {collector.frames} frames; "
                  "raise total_frames to train on, or use resume=false to start afresh",
                  file=sys.stderr)
            env.close()
            eval_env.close()
            return json.loads((run_dir / "summary.json").read_text())

    where = "-".join(filter(None, [(tags or {}).get("algo"), (tags or {}).get("env")]))  # e.g. ppo-cartpole
    run_name = " ".join(filter(None, [where, run_dir.name if run_dir.name != "default" else ""])
                        ) or run_dir.name
    logger = build("logger", cfg.logger, run_dir=run_dir, run_name=run_name,
                   run_id=state.get("mlflow_run_id") if state else None,
                   tags={**(tags or {}), "seed": str(cfg.seed), "run_dir": str(run_dir.resolve()),
                         **_paper_tags(cfg)})
    config_file = run_dir / "config.yaml"
    config_file.write_text(OmegaConf.to_yaml(cfg, resolve=True))
    if state is None:
        logger.log_params(flatten(OmegaConf.to_container(cfg, resolve=True)))
        logger.log_artifact(config_file)
    progress = Progress(collector.total_frames, collector.frames, cfg.progress)
    hooks["progress"] = ProgressHook(progress, stats)
    trainer = Trainer(collector, loss, optimizer, hooks, cfg.trainer.epochs_per_batch,
                      cfg.trainer.optim_steps_per_epoch, cfg.trainer.learning_starts, buffer, logger)
    if state is not None:
        trainer.optim_steps, trainer.batches = int(state["optim_steps"]), int(state["batches"])
        trainer.elapsed_before = float(state["wall_time"])

    def save() -> None:
        keep_buffer = buffer is not None and (
            cfg.checkpoint.buffer is True or (cfg.checkpoint.buffer == "auto" and
                                              buffer.nbytes() <= cfg.checkpoint.max_buffer_mb * 2**20))
        checkpoint.save({
            "frames": trainer.frames, "optim_steps": trainer.optim_steps,
            "batches": trainer.batches, "wall_time": trainer.wall_time,
            "loss": loss.state_dict(), "optimizer": optimizer.state_dict(),
            "collector": collector.state_dict(),
            "buffer": buffer.state_dict() if keep_buffer else None,
            "hooks": {k: h.state_dict() for k, h in hooks.items()},
            "rng": checkpoint.rng_state(), "mlflow_run_id": logger.run_id,
            "config": OmegaConf.to_yaml(cfg, resolve=True),
        }, run_dir / CHECKPOINT)

    status = "FAILED"
    previous = _install_stop_handlers(trainer)
    try:
        trainer.train()
        # Saved here, not in a hook, so that a signal landing after the checkpoint
        # hook of the last batch still keeps that batch (else it is trained twice).
        save()
        status = "KILLED" if trainer.interrupted else "FINISHED"
    finally:
        _restore_handlers(previous)
        progress.close()
        summary = {
            "status": {"KILLED": "interrupted"}.get(status, status.lower()),
            "frames": trainer.frames, "total_frames": collector.total_frames,
            "stop_reason": trainer.stop_reason,
            "optim_steps": trainer.optim_steps, "wall_time_s": round(trainer.wall_time, 3),
            **evaluation.last,
            "train/episode_return_recent": (sum(stats.recent_returns) / len(stats.recent_returns)
                                            if stats.recent_returns else None),
            "mlflow_run_id": logger.run_id, "run_dir": str(run_dir),
        }
        _write_json(run_dir / "summary.json", summary)
        if status != "FAILED":
            logger.log_artifact(run_dir / "summary.json")
        logger.finish(status)
        env.close()
        eval_env.close()
    if trainer.interrupted:
        chain_signal_handler(previous, trainer.stop_signal)
    return summary


def _paper_tags(cfg: DictConfig) -> dict[str, str]:
    paper = cfg.get("paper")
    return {f"paper.{k}": str(v) for k, v in paper.items()} if paper else {}


def _restore(state, loss, optimizer, collector, buffer, hooks, path) -> None:
    try:
        loss.load_state_dict(state["loss"])
        optimizer.load_state_dict(state["optimizer"])
        collector.load_state_dict(state["collector"])
        if buffer is not None and state.get("buffer") is not None:
            buffer.load_state_dict(state["buffer"])
        for name, hook in hooks.items():
            if name in state["hooks"]:
                hook.load_state_dict(state["hooks"][name])
        checkpoint.set_rng_state(state["rng"])
    except (RuntimeError, KeyError, ValueError) as err:
        raise CheckpointError(
            f"checkpoint {path} does not fit this config ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:300]})", key="resume",
            fix="resume with the config the run started with (see its config.yaml), "
            "or start afresh with resume=false") from None


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2")
                     if hasattr(signal, n))


def _install_stop_handlers(trainer: Trainer) -> dict:
    """SIGTERM, SIGINT, SIGUSR1/2 end the loop after the current batch, with a checkpoint.

    A second signal restores the previous handler (a second Ctrl-C kills).
    The previous handlers are kept so that, once the checkpoint is written, a
    launcher's own handler (submitit requeues on USR2/SIGTERM) can still run:
    see ``chain_signal_handler``.
    """
    previous = {}

    def handler(signum, frame):
        name = signal.Signals(signum).name
        trainer.request_stop(f"signal {name}")
        trainer.stop_signal = signum
        print(f"\n[rlrun] {name}: stopping after this batch and writing a checkpoint",
              file=sys.stderr, flush=True)
        signal.signal(signum, previous.get(signum, signal.SIG_DFL))

    for sig in STOP_SIGNALS:
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not in the main thread (e.g. some launchers)
            pass
    return previous


def _restore_handlers(previous: dict) -> None:
    for sig, h in previous.items():
        signal.signal(sig, h)


def chain_signal_handler(previous: dict, signum: int | None) -> None:
    """After a checkpoint, hands a stop signal to the handler that was installed before rlrun's.

    submitit's handler requeues the job (and exits); with no Python handler
    there is nothing to do and the caller exits with 128 + signum.
    """
    handler = previous.get(signum) if signum is not None else None
    if callable(handler):
        handler(signum, None)
