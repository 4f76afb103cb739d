"""Composing a single run's config in a forked process while this one imports torch (issue 27).

A 1,024-frame run spent about a second composing its config with Hydra and checking it
(presets, keys, the run directory, the env id, which imports gymnasium) before it started
importing torch, on one core of two. ``beside`` forks first: the child composes and checks,
the parent meanwhile imports torch and the training modules, then takes the composed config
(pickled: the very object Hydra made, flags and interpolations included).

A bad input still ends the command before torch is imported: the child prints its one-line
error (or Hydra's message) itself, and a thread of the parent that waits for the child's
answer ends the parent at once with the child's exit code, wherever its import has got to.
Anything else the child cannot settle (an unexpected exception, a config that does not
pickle) is answered "again": the parent composes in-process, as before, so that the same
message or traceback appears. The fork is made only when a core is free for it
(``available``): on busy cores it costs more than it saves.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from rlrun.core.signals import die_with_parent

AGAIN = object()
"""``beside``'s answer when the parent must do the work itself."""

BESIDE_ENV = "RLRUN_COMPOSE_BESIDE"
"""``RLRUN_COMPOSE_BESIDE=0`` composes in the run's own process, ``=1`` always in a forked one;
unset, a fork is made when a core is free for it (``spare_core``)."""

_EXIT, _RESULT, _AGAIN = b"X", b"R", b"A"


def available() -> bool:
    """Whether to compose ``beside`` (a fork: Linux/macOS; not with ``HYDRA_FULL_ERROR=1``, whose
    tracebacks belong in the run's own process): as ``RLRUN_COMPOSE_BESIDE`` says, else when
    ``spare_core()``."""
    if not hasattr(os, "fork") or os.environ.get("HYDRA_FULL_ERROR") == "1":
        return False
    setting = os.environ.get(BESIDE_ENV, "")
    return setting == "1" or (setting != "0" and spare_core())


def spare_core(loadavg: str = "/proc/loadavg") -> bool:
    """Whether a core is free now for a second process: fewer tasks are runnable (the fourth
    field of ``/proc/loadavg``, this process included) than cores are usable.

    The fork pays only then. With every core busy (other jobs, or MLflow's worker started just
    before) the child and the parent share the cores they get, and the fork's own cost (0.4 s
    of CPU more for a 1,024-frame run, measured on this project's 2-core machine at load 1-2)
    makes the command slower, a bad input's error included. Without the file (macOS): assumed free.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    if cores < 2:
        return False
    try:
        with open(loadavg) as f:
            running = int(f.read().split()[3].partition("/")[0])
    except (OSError, ValueError, IndexError):
        return True
    return running < cores


def beside(work: Callable[[], Any], meanwhile: Callable[[], None]) -> Any:
    """Runs ``work`` in a forked child while this process runs ``meanwhile``.

    Returns ``work``'s result, or ``AGAIN`` if the child could not settle it. When ``work``
    returns an int (an exit code: it has reported an error itself) or exits, this process
    exits with that code as soon as the child ends, even in the middle of ``meanwhile``.
    An exception of ``meanwhile`` (other than ``KeyboardInterrupt``) is dropped: what it was
    doing is done again later, on the path that would have done it without ``beside``.
    """
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # else the child's exit would write the parent's buffered text twice
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child ends in os._exit (coverage is not written)
        os.close(read)
        _child(work, write)
    os.close(write)
    answer = _Answer(read, pid)
    try:
        meanwhile()
    except Exception:
        pass
    except BaseException:  # Ctrl-C: the child (which ignores SIGINT) has nothing more to do
        _kill(pid)
        raise
    return answer.get()


class _Answer:
    """Waits on a thread for the child's answer; ends the process on an exit code."""

    def __init__(self, fd: int, pid: int):
        self.fd, self.pid = fd, pid
        self.data = b""
        self.thread = threading.Thread(target=self._wait, name="rlrun-compose", daemon=True)
        self.thread.start()

    def _wait(self) -> None:
        chunks = []
        while chunk := os.read(self.fd, 1 << 16):
            chunks.append(chunk)
        os.close(self.fd)
        _reap(self.pid)
        self.data = b"".join(chunks)
        if self.data[:1] == _EXIT:  # the child has printed the error: end here, torch imported or not
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(int(self.data[1:]))

    def get(self) -> Any:
        self.thread.join()
        if self.data[:1] != _RESULT:
            return AGAIN
        try:
            return pickle.loads(self.data[1:])
        except Exception:
            return AGAIN


def _child(work: Callable[[], Any], fd: int) -> None:
    """The forked child: runs ``work``, writes the answer to ``fd``, ends without clean-up
    (the parent's ``atexit`` handlers and buffers are the parent's)."""
    message = _AGAIN
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to report, once
        die_with_parent()
        try:
            result = work()
        except SystemExit as stop:  # Hydra's own error path (its message printed, exit 1)
            result = stop.code if stop.code is not None else 0
        if isinstance(result, bool) or not isinstance(result, int):
            message = _RESULT + pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        else:
            message = _EXIT + str(result).encode()
    except BaseException:  # a bug, an unpicklable result: the parent does it itself
        message = _AGAIN
    finally:
        try:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            view = memoryview(message)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os._exit(0)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
