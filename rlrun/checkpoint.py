"""Atomic checkpoints loaded without unpickling code.

A checkpoint is one ``torch.save`` file of tensors, numbers, strings, lists and
dicts, written to a temporary file in the same directory, fsynced, then moved
over the old one with ``os.replace`` (atomic on POSIX): a crash mid-write
leaves the previous checkpoint intact. Loading uses ``weights_only=True``.
"""

from __future__ import annotations

import os
import random
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlrun.errors import CheckpointError

FORMAT_VERSION = 2  # 2: the policy is its own component (loss state keys policy.*), exploration saved apart


def save(state: dict[str, Any], path: str | Path) -> None:
    """Writes ``state`` to ``path`` atomically."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save({"format_version": FORMAT_VERSION, **state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_weights_only(path: str | Path) -> Any:
    """``torch.load`` of tensors and plain values only; torch's warnings on a file it refuses
    (pickle protocols, allow-list advice) are not the user's, rlrun's error says what is wrong."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.load(path, map_location="cpu", weights_only=True)


def load(path: str | Path) -> dict[str, Any]:
    """Reads a checkpoint, raising ``CheckpointError`` with a fix if it cannot be used."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint file at {path}", key="resume",
                              fix="point resume= at a run directory or checkpoint.pt written by rlrun")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty (0 bytes)", key="resume",
                              fix=f"delete {path} to start afresh, or set resume= to another checkpoint")
    try:
        state = load_weights_only(path)
    except Exception as err:
        raise CheckpointError(
            f"cannot read checkpoint {path} ({type(err).__name__}: {error_reason(err)})",
            key="resume",
            fix=f"the file is damaged or not an rlrun checkpoint: delete {path} to start afresh, "
            "or set resume= to another checkpoint",
        ) from None
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path} is not an rlrun checkpoint of format {FORMAT_VERSION}",
                              key="resume", fix=f"delete {path} to start afresh")
    return state


# Lines of torch's weights-only error that are advice, not the reason: retrying with
# weights_only=False or allow-listing globals would execute code from the file.
_ADVICE = ("weights only load failed", "weights_only", "please file an issue",
           "check the documentation", "pytorch.org")


def error_reason(err: BaseException) -> str:
    """The line of a load error that says what is wrong, without torch's advice."""
    for line in str(err).splitlines():
        line = line.strip().removeprefix("WeightsUnpickler error:").split(" Please ")[0].strip()
        if line and not any(a in line.lower() for a in _ADVICE):
            return line[:300]
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
