"""``logger=wandb``: Weights & Biases, offline unless an API key is configured.

The run's config, the reproducibility tags and the same metric names and steps as
the other loggers (W&B's own step is rlrun's step: frames, or updates offline), so
curves line up across trackers; files (``config.yaml``, ``policy.pt``, evaluation
videos, ``summary.json``) are saved with the run, videos also as media at the step
of their evaluation.

Where it goes: online when an API key is configured (``WANDB_API_KEY``, or
``wandb login``'s netrc entry), else offline into ``<run dir>/wandb/offline-run-*``
(``WANDB_DIR`` or ``logger.dir`` move it), to upload later with ``wandb sync``.
``WANDB_MODE``, when set, decides instead.

Resuming: the W&B run id is kept in the run directory's ``tracking.json``
(``wandb_run_id``), so a resumed rlrun run continues the same W&B run
(``resume="allow"``). W&B keeps the first value logged at a step and drops a step
lower than the run's last one, so metrics go through a journal (``rlrun.loggers.journal``)
and reach W&B once a checkpoint covers them: after a kill and resume every (metric, step)
is there once, with the values of the attempt that continued, at most one checkpoint
interval behind the run. Offline, each start writes its own ``offline-run-*`` folder with
the same id; ``wandb sync`` uploads them in start order as one resumed run.
"""

from __future__ import annotations

import netrc
import os
import re
import secrets
import shutil
import string
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from rlrun.core.contracts import Logger
from rlrun.core.errors import ConfigError
from rlrun.core.registry import register
from rlrun.core.rundir import read_tracking, write_tracking
from rlrun.loggers.journal import JournaledLogger
from rlrun.loggers.tracking import say

TRACKING_KEY = "wandb_run_id"
"""Key of ``tracking.json`` holding the W&B run id (``run_id`` there is the primary tracker's)."""
LABELS = ("algo", "env", "config_hash", "sweep")
"""Tags also shown as W&B's own run labels (``key=value``, at most 64 characters each)."""
MODES = ("auto", "online", "offline", "disabled")
INSTALL = "logger=wandb needs `pip install 'rlrun[wandb]'`"
DEFAULT_HOST = "https://api.wandb.ai"


def has_api_key() -> bool:
    """Whether W&B credentials are configured here (environment or netrc), without the network."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlsplit(os.environ.get("WANDB_BASE_URL") or DEFAULT_HOST).netloc
    path = os.environ.get("NETRC") or str(Path.home() / ".netrc")
    try:
        entry = netrc.netrc(path).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(entry and entry[2])


def new_id() -> str:
    """A fresh W&B run id: 8 lowercase letters and digits, as W&B makes them."""
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def resolve_mode(mode: str) -> str | None:
    """W&B's mode for ``logger.mode``: under ``auto``, ``WANDB_MODE`` when set, else online with
    an API key and offline without."""
    if mode not in MODES:
        raise ConfigError(f"unknown mode {mode!r}", key="logger.mode", fix=f"use one of: {', '.join(MODES)}")
    if mode != "auto":
        return mode
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    return "online" if has_api_key() else "offline"


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"optim.lr": x}`` -> ``{"optim": {"lr": x}}`` (W&B shows nested config as ``optim.lr``);
    a key that would collide with a value stays flat."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = out
        for p in parents:
            child = node.setdefault(p, {})
            if not isinstance(child, dict):
                node = None
                break
            node = child
        if node is None or isinstance(node.get(leaf), dict):
            out[key] = value
        else:
            node[leaf] = value
    return out


def continued_id(run_dir: Path, run_id: str | None) -> str | None:
    """The W&B run to continue: the one ``tracking.json`` recorded beside the tracker run being
    continued, else that run's own id (``logger=wandb`` alone: they are one); None: a new run."""
    if run_id is None:
        return None
    known = read_tracking(run_dir)
    if known.get("run_id") == run_id and known.get(TRACKING_KEY):
        return str(known[TRACKING_KEY])
    return run_id


class WandbLogger(Logger):
    """One W&B run per rlrun run, continued on resume; see the module docstring.

    Args:
        run_dir: The run directory (``tracking.json``; W&B's files unless ``dir``/``WANDB_DIR``).
        run_name: Display name.
        project: W&B project.
        entity: W&B entity (user or team); None: the account's default.
        mode: auto (online with an API key, else offline) | online | offline | disabled.
        dir: Where W&B writes its ``wandb/`` folder; None: ``WANDB_DIR``, else the run directory.
        group: W&B group; None: the sweep's name in a multirun.
        run_id: The tracker run being continued (resume), None for a fresh run.
        tags: Tags of a new run: W&B config keys ``tags.<key>``, and labels for ``LABELS``.
    """

    def __init__(self, run_dir: Path, run_name: str, project: str = "rlrun", entity: str | None = None,
                 mode: str = "auto", dir: str | None = None, group: str | None = None,
                 run_id: str | None = None, tags: dict[str, str] | None = None):
        try:
            import wandb
        except ImportError:
            raise ConfigError(INSTALL) from None
        self.run_dir = Path(run_dir)
        tags = {k: str(v) for k, v in (tags or {}).items()}
        wandb_mode = resolve_mode(mode)
        wid = continued_id(self.run_dir, run_id)
        fresh = wid is None
        # passed explicitly: W&B reads its environment once per process, and a process may run
        # several rlrun runs (in-process sweeps, tests)
        where = Path(dir or os.environ.get("WANDB_DIR") or self.run_dir)
        where.mkdir(parents=True, exist_ok=True)
        try:
            self.run = wandb.init(
                project=project, entity=entity, name=run_name, id=wid or new_id(),
                resume="allow", group=group or tags.get("sweep"), dir=str(where), mode=wandb_mode,
                config=self._tag_config(tags) if fresh else None,
                tags=[f"{k}={tags[k]}"[:64] for k in LABELS if tags.get(k)] if fresh else None,
                reinit="create_new",  # several rlrun runs in one process (in-process sweeps)
                # rlrun's own console output stays as it is; W&B says only what matters
                settings=wandb.Settings(console="off", quiet=True))
        except Exception as err:  # no network for online mode, a bad key, an unwritable dir
            raise ConfigError(f"cannot start the W&B run ({type(err).__name__}: {err})"[:500],
                              key="logger.mode", fix="check the API key (`wandb login`) and network, "
                              "or log offline with logger.mode=offline (then `wandb sync`)") from None
        self.wandb = wandb
        self.run_id = self.run.id
        self._saved_id = False
        self._step: int | None = None
        self._videos: list[tuple[int | None, Path]] = []  # (evaluation's step, file)
        if self.run.offline:
            why = (f"WANDB_MODE={wandb_mode}" if mode == "auto" and os.environ.get("WANDB_MODE") else
                   "no W&B API key configured" if mode == "auto" else f"logger.mode={mode}")
            say(f"[rlrun] W&B run {self.run.id} logs offline ({why}); upload it with "
                f"`wandb sync {Path(self.run.dir).parent}`")

    @staticmethod
    def _tag_config(tags: dict[str, str]) -> dict[str, str]:
        return {f"tags.{k}": v for k, v in tags.items()}

    def _save_id(self) -> None:
        # after run.py wrote tracking.json (its first call to us comes later): kept beside its run_id
        if not self._saved_id:
            write_tracking(self.run_dir, {**read_tracking(self.run_dir), TRACKING_KEY: self.run.id})
            self._saved_id = True

    def log_params(self, params: dict[str, Any]) -> None:
        self._save_id()
        self.run.config.update(nest(params), allow_val_change=True)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._save_id()
        data: dict[str, Any] = {k: float(v) for k, v in metrics.items()}
        due = [v for v in self._videos if v[0] is None or v[0] <= step]
        if due:  # recorded at an evaluation these metrics reach (metrics may come later: journal)
            data["eval/video"] = self.wandb.Video(str(due[-1][1]), format="mp4")
            self._videos = [v for v in self._videos if v not in due]
        self.run.log(data, step=int(step))
        self._step = int(step)

    def log_artifact(self, path: str | Path) -> None:
        self._save_id()
        path = Path(path).resolve()
        run_dir = self.run_dir.resolve()
        # a copy in W&B's files folder: what was logged stays as it was (a symlink would follow
        # later rewrites, and W&B warns on each one); runs' own subfolders (videos/) are kept
        dest = Path(self.run.dir) / (path.relative_to(run_dir) if run_dir in path.parents else path.name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
        self.run.save(str(dest), base_path=self.run.dir, policy="now")
        if path.suffix == ".mp4":  # rlrun.trainer.video names them eval-frame<step>.mp4
            found = re.search(r"frame(\d+)", path.stem)
            self._videos.append((int(found.group(1)) if found else None, dest))

    def set_tags(self, tags: dict[str, str]) -> None:
        self._save_id()
        self.run.config.update(self._tag_config({k: str(v) for k, v in tags.items()}),
                               allow_val_change=True)

    def finish(self, status: str = "FINISHED") -> None:
        self._save_id()
        if self._videos and self._step is not None:
            self.run.log({"eval/video": self.wandb.Video(str(self._videos[-1][1]), format="mp4")},
                         step=self._step)
            self._videos.clear()
        self.run.finish(exit_code=0 if status == "FINISHED" else 1)


@register("logger", "wandb")
def make_wandb(run_dir: Path, run_name: str, project: str = "rlrun", entity: str | None = None,
               mode: Literal["auto", "online", "offline", "disabled"] = "auto", dir: str | None = None,
               group: str | None = None, run_id: str | None = None, tags: dict | None = None,
               resume_step: int | None = None) -> JournaledLogger:
    """Weights & Biases: online with an API key, else offline (``wandb sync`` uploads it later).

    Metrics reach W&B through ``<run_dir>/wandb.journal`` once a checkpoint covers them
    (``rlrun.loggers.journal``): W&B keeps the first value logged at a step and drops steps below
    its last one, so a killed attempt's rows past its checkpoint must never reach it; and a
    SIGKILL takes W&B's unflushed records with it, so a resumed run sends the rows up to its
    checkpoint again (W&B drops the ones it has).
    """
    inner = WandbLogger(run_dir, run_name, project, entity, mode, dir, group, run_id, tags)
    return JournaledLogger(inner, Path(run_dir) / "wandb.journal", resume_step if run_id else None,
                           resend=True)
