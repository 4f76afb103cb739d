"""Stop signals: SIGTERM, SIGINT (Ctrl-C), SIGUSR1/2 end a run after the current batch, with a checkpoint.

The first signal asks the trainer to stop; the run writes its checkpoint and
summary, then hands the signal to the handler that was installed before
rlrun's (submitit's requeue handler under SLURM, see ``rlrun.launch.signals``),
and the command exits with ``128 + signal`` (130 for Ctrl-C, 143 for SIGTERM),
printing one line. Python's own Ctrl-C handler is not chained: it would raise a
``KeyboardInterrupt`` and print a traceback after the checkpoint is safe.

A second Ctrl-C stops at once: rlrun's handler raises ``StopNow`` (a
``KeyboardInterrupt``) wherever the main thread is, the run records itself as
interrupted without a checkpoint of the batch in progress (the last one stays),
shuts its workers down, and the command prints one line and exits 130; a third
press ends the process by the signal itself. Putting Python's own handler back
after the first press instead made the run record ``failed``. Other signals
(and a Ctrl-C under a launcher's handler) hand their second delivery to the
handler that was there before: SIGTERM's default ends the process, submitit's
requeues.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2")
                     if hasattr(signal, n))
REASON_PREFIX = "signal "


_OUTLIVED = tuple(s for s in STOP_SIGNALS if s != signal.SIGINT)
_at_fork_registered = False


def _ignore(signum: int, frame: Any) -> None:
    """The stop signals' handler in rlrun's child processes: nothing (the main process decides)."""


def die_with_parent() -> None:
    """Has the kernel kill this process when its parent process dies (``PR_SET_PDEATHSIG``,
    Linux; nothing elsewhere): rlrun's helper processes never outlive the run that started them."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _default_stop_signals_in_child() -> None:
    for sig in _OUTLIVED:
        signal.signal(sig, signal.SIG_DFL)


def survive_stop_signals() -> None:
    """For every child process rlrun starts (collector workers, Ray actors, the MLflow worker).

    A terminal's Ctrl-C reaches the whole foreground process group, and SLURM signals every
    process of a job step (submitit's preemption and time-out send SIGUSR2 and SIGTERM to all
    of them). A child that died of one took the run's data with it (the MLflow worker died of
    SIGUSR2 before the checkpoint's metrics reached the tracker, and the job ended failed
    instead of requeued): the main process decides, and ends its children itself.

    SIGINT is ignored (``SIG_IGN``, inherited by the env processes a worker starts, as before).
    The others get a handler that does nothing rather than ``SIG_IGN``, which would outlive
    ``exec`` into processes that are not rlrun's, and forked children (gymnasium's
    ``AsyncVectorEnv`` workers, which their owner ends with SIGTERM) get the default back. The
    mask ``stop_signals_blocked`` left on this process is lifted: signals that came meanwhile
    reach the handlers now.
    """
    global _at_fork_registered
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (a threaded actor): its process decides
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in _OUTLIVED:
        signal.signal(sig, _ignore)
    if not _at_fork_registered and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_default_stop_signals_in_child)
        _at_fork_registered = True
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


@contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """Blocks the stop signals in this thread while child processes start, so that they start immune.

    A blocked signal mask survives fork and exec: a child started here receives no stop signal
    before its own ``survive_stop_signals`` runs, and helper processes
    that run none of rlrun's code (multiprocessing's forkserver, whose death reads as every
    worker exiting with code 255, and its resource tracker; Python's tracker blocks SIGINT and
    SIGTERM this way, not SLURM's SIGUSR2) never do. Signals that arrive meanwhile are delivered
    to this process when the block ends.
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class StopNow(KeyboardInterrupt):
    """A second Ctrl-C: stop at once, without a checkpoint of the batch in progress."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class Stoppable(Protocol):
    def request_stop(self, reason: str, interrupted: bool = True, signum: int | None = None) -> None: ...


def stop_reason(signum: int) -> str:
    """The trainer's stop reason for a signal, e.g. ``signal SIGINT``."""
    return f"{REASON_PREFIX}{signal.Signals(signum).name}"


def install_stop_handlers(trainer: Stoppable) -> dict[int, Any]:
    """Makes each stop signal ask ``trainer`` to stop after the current batch.

    Returns:
        The handlers that were installed before, for ``restore_handlers`` and
        ``chain_signal_handler``. Outside the main thread nothing is installed.
    """
    previous: dict[int, Any] = {}
    received: set[int] = set()

    def handler(signum: int, frame: Any) -> None:
        own_ctrl_c = signum == signal.SIGINT and not _chains_to(previous.get(signum))
        if signum in received and own_ctrl_c:
            signal.signal(signum, signal.SIG_DFL)  # a third press ends the process by the signal itself
            raise StopNow(signum)
        received.add(signum)
        name = signal.Signals(signum).name
        trainer.request_stop(stop_reason(signum), signum=signum)
        print(f"\n[rlrun] {name}: stopping after this batch and writing a checkpoint "
              f"({'press Ctrl-C again' if signum == signal.SIGINT else 'signal again'} to stop at once)",
              file=sys.stderr, flush=True)
        if not own_ctrl_c:  # a launcher's handler (or SIGTERM's default) takes the next delivery
            signal.signal(signum, previous.get(signum, signal.SIG_DFL))

    for sig in STOP_SIGNALS:
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not in the main thread (e.g. some launchers)
            pass
    return previous


def _chains_to(handler: Any) -> bool:
    """Whether ``handler`` is someone's own (a launcher's), not Python's Ctrl-C handler or a default."""
    return callable(handler) and handler is not signal.default_int_handler


def restore_handlers(previous: dict[int, Any]) -> None:
    for sig, h in previous.items():
        signal.signal(sig, h)


def chain_signal_handler(previous: dict[int, Any], signum: int | None) -> None:
    """After the checkpoint, hands a stop signal to the handler that was installed before rlrun's.

    submitit's handler requeues the job (and exits). With no Python handler,
    or Python's default Ctrl-C handler (which would only raise a
    ``KeyboardInterrupt``), there is nothing to do: the caller exits with
    ``exit_code``.
    """
    handler = previous.get(signum) if signum is not None else None
    if _chains_to(handler):
        handler(signum, None)


def exit_code(summary: dict[str, Any]) -> int:
    """The process exit code for a run's summary: 0, or ``128 + signal`` for a run stopped by one.

    An interrupted run whose stop reason names no signal exits with 143 (SIGTERM's code).
    """
    if summary.get("status") != "interrupted":
        return 0
    reason = str(summary.get("stop_reason") or "")
    if reason.startswith(REASON_PREFIX):
        try:
            return 128 + signal.Signals[reason[len(REASON_PREFIX):]].value
        except KeyError:
            pass
    return 128 + signal.SIGTERM


def is_interrupt_code(code: object) -> bool:
    """Whether a process exit code says 'stopped by a signal, with a checkpoint' (e.g. 130, 143)."""
    return isinstance(code, int) and 128 < code < 128 + signal.NSIG and code - 128 in set(STOP_SIGNALS)
