"""A run or sweep directory writes only inside itself (issue 40 §1).

A run directory may come from elsewhere (a colleague's, a cluster's, an archive). A symbolic link
in it (``.rlrun.lock`` -> ``~/.bashrc``) would make an ``open(..., "w")`` write outside it, and a
FIFO or device would block or write somewhere else. rlrun itself never puts a link or a
non-regular file in a run directory, so any such entry is refused before anything is written:
``check_tree`` for the whole directory (before Hydra writes ``.hydra/`` and ``rlrun.log``), and
``open_write`` for each file opened for writing (``O_NOFOLLOW``, then ``fstat``), so a link made
after the check is refused too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO

from rlrun.core.errors import RlrunError

MAX_ENTRIES = 100_000  # a run directory holds tens of files; a sweep directory, some per job


class UnsafeRunFile(RlrunError):
    """A link or non-regular file where rlrun would write."""


def _refuse(path: Path, what: str, key: str) -> UnsafeRunFile:
    return UnsafeRunFile(f"{path} is {what}; rlrun writes only regular files inside the run directory",
                         key=key, fix=f"remove {path} (or copy the directory without links: cp -rL), "
                         f"or set {key}=<another directory>")


def _what(mode: int) -> str | None:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return "not a regular file (a FIFO, socket or device)"


def check_tree(root: str | Path, key: str = "hydra.run.dir") -> None:
    """Refuses ``root`` if anything in it (at any depth) is a link or a non-regular file.

    ``root`` itself may be a link (a user's choice of where runs go); what is inside may not.
    A missing ``root`` is fine: rlrun makes it.
    """
    root = Path(root)
    if not root.is_dir():
        return
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            seen += 1
            if seen > MAX_ENTRIES:
                return
            path = Path(dirpath) / name
            try:
                what = _what(os.lstat(path).st_mode)
            except OSError:
                continue  # gone meanwhile
            if what:
                raise _refuse(path, what, key)


def check_file(path: str | Path, key: str = "hydra.run.dir") -> Path:
    """Refuses ``path`` if it is a link or a non-regular file (a missing one is fine): the check right
    before a writer that opens the path itself (torch's ONNX exporter, a library's file)."""
    path = Path(path)
    try:
        what = _what(os.lstat(path).st_mode)
    except FileNotFoundError:
        return path
    if what:
        raise _refuse(path, what, key)
    return path


def open_write(path: str | Path, mode: str = "a", key: str = "hydra.run.dir", **kwargs) -> IO:
    """``open(path, mode)`` for writing that refuses a link (``O_NOFOLLOW``) or a non-regular file,
    creating nothing and truncating nothing when it refuses (the truncation of ``"w"`` happens only
    after the ``fstat`` check)."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    if "+" in mode:
        flags = (flags & ~os.O_WRONLY) | os.O_RDWR
    if "a" in mode:
        flags |= os.O_APPEND
    try:
        lst = os.lstat(path)
    except FileNotFoundError:
        lst = None
    if lst is not None and _what(lst.st_mode):
        raise _refuse(path, _what(lst.st_mode) or "", key)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as err:
        if err.errno == getattr(os, "ELOOP", 40):
            raise _refuse(path, "a symbolic link", key) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, _what(st.st_mode) or "not a regular file", key)
        os.set_blocking(fd, True)
        if "w" in mode:
            os.ftruncate(fd, 0)
        return os.fdopen(fd, mode, **kwargs)  # an fd: fdopen neither creates nor truncates
    except BaseException:
        os.close(fd)
        raise


def open_fd(path: str | Path, flags: int, key: str = "hydra.run.dir") -> int:
    """``os.open(path, flags | O_NOFOLLOW)`` that refuses a link or non-regular file (for locks)."""
    path = Path(path)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as err:
        if err.errno == getattr(os, "ELOOP", 40):
            raise _refuse(path, "a symbolic link", key) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _refuse(path, _what(st.st_mode) or "not a regular file", key)
    os.set_blocking(fd, True)
    return fd
