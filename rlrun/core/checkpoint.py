"""Atomic checkpoints loaded without unpickling code.

A checkpoint is one ``torch.save`` file of tensors, numbers, strings, lists and
dicts, written to a temporary file in the same directory, fsynced, then moved
over the old one with ``os.replace`` (atomic on POSIX): a crash mid-write
leaves the previous checkpoint intact. Loading uses ``weights_only=True``.

Every file rlrun writes into a run directory goes through ``atomic_write``, and a
write that fails for want of room (a full disk, a quota, a file size limit, a
read-only file system) is one ``WriteError`` naming the file, its directory and
the OS error, with the temp file removed and the previous file untouched.
"""

from __future__ import annotations

import errno
import io
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
import yaml

from rlrun.core import formats, runfiles, saved
from rlrun.core.errors import CheckpointError, RlrunError

FORMAT_VERSION = formats.CURRENT["checkpoint"][1]
# 2: the policy is its own component (loss state keys policy.*), exploration saved apart;
# since Trainer.state_dict also under its own key "policy" (what rlrun.lifecycle.load loads; older files
# still resume)

# Errors that say the file system will not take more bytes: the run cannot go on, its
# last checkpoint stands, and freeing room (or another directory) lets the rerun continue.
NO_ROOM = {errno.ENOSPC: "out of space", errno.EDQUOT: "over the disk quota",
           errno.EFBIG: "over the file size limit", errno.EROFS: "a read-only file system"}
RUN_DIR_KEY = "hydra.run.dir"
# What torch's zip writer says when the file under it stops taking bytes (its
# ``[enforce fail at inline_container.cc]`` RuntimeError; the OSError is its context).
_TORCH_WRITE_FAILED = ("inline_container", "PytorchStreamWriter", "unexpected pos", "file write failed",
                       "iostream error")


class WriteError(RlrunError):
    """A file of the run could not be written (full disk, quota, size limit, read-only)."""


def write_error(err: BaseException, path: str | Path, key: str = RUN_DIR_KEY) -> WriteError | None:
    """``err`` as one ``WriteError`` naming ``path`` (a file or directory) if it says the file system
    took no more bytes (an ``OSError`` in ``NO_ROOM``, or torch's zip writer failing), else None.
    ``key`` is the option that chose the place (a run's directory, or a command's output)."""
    path = Path(path).absolute()
    where = path if path.is_dir() else path.parent
    oserror = next((e for e in _chain(err) if isinstance(e, OSError) and e.errno in NO_ROOM), None)
    if oserror is not None:
        why = f"{NO_ROOM[oserror.errno]} ({oserror.strerror})"
    elif isinstance(err, RuntimeError) and any(m in str(err) for m in _TORCH_WRITE_FAILED):
        why = f"the write failed with {_free_bytes(where)} free on its file system"
    else:
        return None
    what = f"{path.name} in {where}" if where != path else f"the run directory {where}"
    kept = f"; the previous {path.name} is intact" if where != path and path.is_file() else ""
    then = ", then rerun the same command to continue" if key == RUN_DIR_KEY else ""
    return WriteError(f"cannot write {what}: {why}{kept}", key=key,
                      fix=f"free space under {where} (or set {key}=<a place with room>){then}")


def _chain(err: BaseException) -> list[BaseException]:
    """``err`` and the exceptions it was raised from or while handling."""
    seen: list[BaseException] = []
    while err is not None and err not in seen:
        seen.append(err)
        err = err.__cause__ or err.__context__
    return seen


def _free_bytes(where: Path) -> str:
    try:
        st = os.statvfs(where)
    except OSError:
        return "unknown space"
    return f"{st.f_bavail * st.f_frsize / 2**20:.1f} MB"


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], Any], key: str = RUN_DIR_KEY) -> Path:
    """Writes ``path`` through ``write(file)`` atomically: a temp file in the same directory,
    fsynced, then ``os.replace``; on any failure the temp file is removed and ``path`` keeps
    what it held. A file system that takes no more bytes raises ``WriteError``.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")  # rundir.remove_stale_temp_files' pattern
    try:
        tmp.unlink(missing_ok=True)  # a stale temp file (or a link planted in its name) goes first
        with runfiles.open_write(tmp, "wb", key=key) as f:  # and a link made since is refused
            sink = _Sink(f)
            write(sink)
            if sink.failed is not None:  # a writer that swallowed the error must not pass for written
                raise sink.failed
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as err:
        failed = write_error(err, path, key)
        if failed is None:
            raise
        raise failed from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


class _Sink(io.RawIOBase):
    """The temp file as a writer sees it: after the first failed write, writes are dropped.

    torch's zip writer finishes its archive in its C++ destructor when a save failed
    part-way; a write failing there cannot be raised, and the process aborts
    (``terminate called after throwing an instance of 'c10::Error'``) whenever the
    writer is collected. The file is deleted anyway, so those late bytes go nowhere.
    """

    def __init__(self, file: IO[bytes]):
        super().__init__()
        self.file, self.failed = file, None

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self.file.seekable()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.file.seek(offset, whence)

    def tell(self) -> int:
        return self.file.tell()

    def write(self, data: Any) -> int:
        if self.failed is not None:
            return len(data)
        try:
            return self.file.write(data)
        except OSError as err:
            self.failed = err
            raise

    def flush(self) -> None:
        if self.failed is None and not self.file.closed:
            self.file.flush()


def atomic_write_text(path: str | Path, text: str, key: str = RUN_DIR_KEY) -> Path:
    """``atomic_write`` of a text file (UTF-8)."""
    return atomic_write(path, lambda f: f.write(text.encode()), key)


def save(state: dict[str, Any], path: str | Path) -> None:
    """Writes ``state`` to ``path`` atomically (``atomic_write``)."""
    atomic_write(path, lambda f: torch.save({"format_version": FORMAT_VERSION, **state}, f))


def load_weights_only(path: str | Path, kind: str = "checkpoint") -> Any:
    """``torch.load`` of tensors and plain values only, size-bounded (``rlrun.core.saved``); torch's
    warnings on a file it refuses (pickle protocols, allow-list advice) are not the user's, rlrun's
    error says what is wrong."""
    return saved.load_torch(path, kind)


# The fields of a checkpoint rlrun reads before it builds anything from it.
CHECKPOINT_SCHEMA = {"format_version": (saved.integer(1), True), "frames": (saved.integer(0), False),
                     "config": (saved.kind(str, name="YAML text"), False),
                     "policy": (saved.kind(dict, name="a mapping of tensors"), False),
                     "loss": (saved.kind(dict, name="a mapping of tensors"), False),
                     "optimizer": (saved.kind(dict, name="a mapping"), False),
                     "hooks": (saved.kind(dict, name="a mapping"), False),
                     "rng": (saved.kind(dict, name="a mapping"), False),
                     "optim_steps": (saved.integer(0), False), "batches": (saved.integer(0), False),
                     "wall_time": (saved.number(), False),
                     "mlflow_run_id": (saved.kind(str, name="a run id"), False)}
_MAPPING = saved.kind(dict, name="a mapping")
# The fields of a run's saved config that loading and resuming read before building anything.
RUN_CONFIG_SCHEMA = {"env": (_MAPPING, True), "model": (_MAPPING, True), "exploration": (_MAPPING, False),
                     "seed": (saved.integer(None), False)}


def load(path: str | Path) -> dict[str, Any]:
    """Reads a checkpoint, raising ``CheckpointError`` with a fix if it cannot be used."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint file at {path}", key="resume",
                              fix="point resume= at a run directory or checkpoint.pt written by rlrun")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty (0 bytes)", key="resume",
                              fix=f"delete {path} to start afresh, or set resume= to another checkpoint")
    fix = f"delete {path} to start afresh, or set resume= to another checkpoint"
    try:
        state = load_weights_only(path)
    except saved.SavedFileError as err:
        raise CheckpointError(err.message, key="resume", fix=fix) from None
    except Exception as err:
        raise CheckpointError(
            f"cannot read checkpoint {path} ({type(err).__name__}: {error_reason(err)})",
            key="resume",
            fix=f"the file is damaged or not an rlrun checkpoint: delete {path} to start afresh, "
            "or set resume= to another checkpoint",
        ) from None
    if not isinstance(state, dict) or "format_version" not in state:
        raise CheckpointError(f"{path} is not an rlrun checkpoint of format {FORMAT_VERSION}",
                              key="resume", fix=f"delete {path} to start afresh")
    state = formats.upgrade("checkpoint", state, path, key="resume")  # a newer format: one line
    try:
        saved.check_fields(state, CHECKPOINT_SCHEMA, path, key="resume", fix=fix)
        if state.get("config"):  # parsed, bounded, here: a resume compares it before building anything
            config = saved.parse_yaml(state["config"], f"{path} (its config)", key="resume", fix=fix)
            saved.check_fields(config, RUN_CONFIG_SCHEMA, f"{path} (its config)", key="resume", fix=fix,
                               what="an rlrun run config (a YAML mapping)")
            upgraded = formats.upgrade_config(config)
            if upgraded != config:  # an older rlrun's spelling: compared and resumed as today's
                state["config"] = yaml.safe_dump(upgraded, sort_keys=False)
    except saved.SavedFileError as err:
        raise CheckpointError(err.message, key="resume", fix=fix) from None
    if "frames" in state:
        state["frames"] = int(state["frames"])
    return state


# Lines of torch's weights-only error that are advice, not the reason: retrying with
# weights_only=False or allow-listing globals would execute code from the file.
_ADVICE = ("weights only load failed", "weights_only", "please file an issue",
           "check the documentation", "pytorch.org")


def error_reason(err: BaseException) -> str:
    """The line of a load error that says what is wrong, without torch's advice (and the line after
    a heading such as ``Error(s) in loading state_dict for PPOLoss:``, which names the key)."""
    lines = [ln.strip().removeprefix("WeightsUnpickler error:").split(" Please ")[0].strip()
             for ln in str(err).splitlines()]
    lines = [ln for ln in lines if ln and not any(a in ln.lower() for a in _ADVICE)]
    if lines:
        return (f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0])[:300]
    return "empty or truncated file" if isinstance(err, EOFError) else "unreadable"


def rng_state() -> dict[str, Any]:
    """The global RNG states as weights-only-loadable values."""
    np_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached": float(np_state[4])},
        "python": list(random.getstate()[1]) + [random.getstate()[0]],
        "python_gauss": random.getstate()[2],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"],
                         n["has_gauss"], n["cached"]))
    py = state["python"]
    random.setstate((py[-1], tuple(py[:-1]), state.get("python_gauss")))
