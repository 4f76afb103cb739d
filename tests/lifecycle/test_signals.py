"""Ctrl-C and SIGTERM: one line, exit 128 + signal, a checkpoint, and the same command continues."""

from __future__ import annotations

import os
import re
import select
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_utils import only_run_dir, spawn, summary_of

from rlrun.core import signals

ARGS = ["total_frames=30720", "collector.frames_per_batch=512", "checkpoint.interval_frames=1024",
        "eval.interval_frames=0", "eval.episodes=1", "logger=csv", "progress=false"]


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Python then installs its own Ctrl-C handler


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_writes_a_checkpoint_prints_one_line_exits_130_and_resumes(tmp_path):
    proc = spawn(ARGS, tmp_path, preexec_fn=default_sigint)
    deadline = time.time() + 120
    while time.time() < deadline and not list(tmp_path.glob("runs/*/*/checkpoint.pt")):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)  # what a terminal sends on Ctrl-C
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) <= 2, err  # the notice when the signal lands, and the closing line
    assert "interrupted (signal SIGINT)" in lines[-1] and "rerun the same command" in lines[-1]
    run_dir = only_run_dir(tmp_path)
    stopped = summary_of(run_dir)
    assert stopped["status"] == "interrupted" and 0 < stopped["frames"] < 30720
    assert torch.load(run_dir / "checkpoint.pt", weights_only=True)["frames"] == stopped["frames"]

    proc = spawn(ARGS, tmp_path, preexec_fn=default_sigint)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert summary_of(run_dir)["frames"] == 30720


@pytest.mark.parametrize(("summary", "code"), [
    ({"status": "finished", "stop_reason": None}, 0),
    ({"status": "finished", "stop_reason": "target return reached"}, 0),
    ({"status": "interrupted", "stop_reason": "signal SIGINT"}, 128 + 2),
    ({"status": "interrupted", "stop_reason": "signal SIGTERM"}, 128 + 15),
    ({"status": "interrupted", "stop_reason": "signal SIGUSR2"}, 128 + int(signal.SIGUSR2)),
    ({"status": "interrupted", "stop_reason": "something else"}, 128 + 15),
])
def test_exit_code_is_128_plus_the_signal(summary, code):
    assert signals.exit_code(summary) == code
    assert signals.is_interrupt_code(code) == (code != 0)


def test_chain_calls_a_launchers_handler_but_not_pythons_ctrl_c_handler():
    calls = []
    previous = {signal.SIGUSR2: lambda s, f: calls.append(s), signal.SIGINT: signal.default_int_handler,
                signal.SIGTERM: signal.SIG_DFL}
    signals.chain_signal_handler(previous, signal.SIGUSR2)
    assert calls == [signal.SIGUSR2]
    signals.chain_signal_handler(previous, signal.SIGINT)  # would raise KeyboardInterrupt if called
    signals.chain_signal_handler(previous, signal.SIGTERM)
    signals.chain_signal_handler(previous, None)
    assert calls == [signal.SIGUSR2]


class Terminal:
    """``python -m rlrun *args`` as the foreground job of a pseudo-terminal, as a user runs it.

    Writing Ctrl-C's character to the terminal makes its line discipline send SIGINT to the
    whole foreground process group (rlrun and any worker processes), as a keyboard does.
    """

    def __init__(self, args: list[str], cwd: Path):
        import pty

        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: a new session whose controlling terminal is the pty
            try:
                os.chdir(cwd)
                signal.signal(signal.SIGINT, signal.SIG_DFL)  # Python then installs its own handler
                os.environ["PYTHONUNBUFFERED"] = "1"
                os.execv(sys.executable, [sys.executable, "-m", "rlrun", *args])
            finally:
                os._exit(127)
        self.output = b""

    def read(self, seconds: float) -> bool:
        """Collects output for ``seconds``; False once the terminal is closed (the job ended)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if select.select([self.fd], [], [], 0.05)[0]:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:  # EIO: no process holds the terminal any more
                    return False
                if not data:
                    return False
                self.output += data
        return True

    def press_ctrl_c(self) -> None:
        os.write(self.fd, b"\x03")

    def wait(self, timeout: float) -> int:
        end = time.monotonic() + timeout
        while self.read(0.1) and time.monotonic() < end:
            pass
        while time.monotonic() < end:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)  # -2: killed by SIGINT itself
            time.sleep(0.05)
        os.killpg(self.pid, signal.SIGKILL)
        raise AssertionError(f"rlrun did not exit within {timeout} s: {self.output.decode(errors='replace')}")

    def group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        return True


# Batches of several seconds: the second press, just after the first is acknowledged, lands inside one.
TTY_ARGS = ["total_frames=10000000", "collector.frames_per_batch=8192", "checkpoint.interval_frames=8192",
            "eval.interval_frames=0", "eval.episodes=1", "logger=csv", "progress=false", "threads=1",
            "hydra.run.dir=run"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pseudo-terminal and POSIX signals")
@pytest.mark.parametrize("collector", ["sync", "multi_sync"])
def test_ctrl_c_twice_on_a_terminal_stops_at_once_with_exit_130_and_one_line_each(tmp_path, collector):
    """Two Ctrl-C through a real terminal, the second while the batch after the first is being
    collected: exit 130 (not a death by the signal), no traceback from rlrun or its workers, one
    line per press, the run recorded as interrupted with its last checkpoint kept, and no
    process of the job left. Bounded: about 30 s each on a loaded 2-core machine."""
    term = Terminal([f"collector={collector}", *TTY_ARGS], tmp_path)
    run_dir = tmp_path / "run"
    deadline = time.monotonic() + 150
    while not (run_dir / "checkpoint.pt").exists():
        assert term.read(0.2) and time.monotonic() < deadline, term.output.decode(errors="replace")
    seen = len(term.output)
    term.press_ctrl_c()
    # The second press as soon as the first is acknowledged, not after a fixed pause: on a fast
    # machine the batch after the checkpoint's can finish within a fixed 0.3 s (CI did once).
    acked = time.monotonic() + 30
    while b"stopping after this batch" not in term.output[seen:]:
        assert term.read(0.02) and time.monotonic() < acked, term.output[seen:].decode(errors="replace")
    term.press_ctrl_c()
    pressed = time.monotonic()
    code = term.wait(timeout=60)
    took = time.monotonic() - pressed
    text = term.output[seen:].decode(errors="replace").replace("\r", "")
    assert code == 130, text
    for bad in ("Traceback", "KeyboardInterrupt", "Exception ignored", "Error"):
        assert bad not in text, text
    # What the user sees: the terminal echoes ^C, and escape sequences show nothing (numba, which
    # rlrun's GAE imports, resets the terminal's colours at exit where colorama is installed).
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", re.sub(r"\^C", "", text))
    lines = [line for line in shown.splitlines() if line.strip()]
    assert len(lines) == 2, text
    assert lines[0].startswith("[rlrun] SIGINT: stopping after this batch and writing a checkpoint")
    assert lines[1].startswith("[rlrun] interrupted (SIGINT twice): stopped at once, without a "
                               "checkpoint of the batch in progress") and str(run_dir) in lines[1]
    assert took < 20, took  # the cleanup of a stopped run plus a prompt exit, not another batch
    summary = summary_of(run_dir)
    assert summary["status"] == "interrupted" and summary["stop_reason"] == "signal SIGINT", summary
    saved = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert saved["frames"] > 0 and saved["frames"] % 8192 == 0
    end = time.monotonic() + 10
    while term.group_alive() and time.monotonic() < end:  # the workers follow the main process
        time.sleep(0.1)
    assert not term.group_alive(), "a process of the job outlived it"


def test_a_second_ctrl_c_raises_stop_now_and_a_third_is_the_default(monkeypatch):
    """In-process: the handler's own logic (the first press asks, the second raises StopNow, a
    launcher's SIGINT handler still takes the second press instead)."""

    class Trainer:
        stop_signal = None
        reasons: list[str] = []

        def request_stop(self, reason: str, interrupted: bool = True, signum: int | None = None) -> None:
            self.reasons.append(reason)
            self.stop_signal = signum

    original = signal.getsignal(signal.SIGINT)  # pytest's (or an xdist worker's): put back at the end
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in `python -m rlrun`
    trainer = Trainer()
    previous = signals.install_stop_handlers(trainer)
    try:
        handler = signal.getsignal(signal.SIGINT)
        handler(signal.SIGINT, None)
        assert trainer.reasons == ["signal SIGINT"] and trainer.stop_signal == signal.SIGINT
        assert signal.getsignal(signal.SIGINT) is handler  # not Python's KeyboardInterrupt handler
        with pytest.raises(signals.StopNow):
            handler(signal.SIGINT, None)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_DFL
    finally:
        signals.restore_handlers(previous)

    calls = []
    signal.signal(signal.SIGINT, lambda s, f: calls.append(s))  # a launcher's own Ctrl-C handler
    try:
        previous = signals.install_stop_handlers(Trainer())
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        assert signal.getsignal(signal.SIGINT) is previous[signal.SIGINT]  # it takes the next press
        signals.restore_handlers(previous)
    finally:
        signal.signal(signal.SIGINT, original)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and SIGUSR2")
@pytest.mark.parametrize(("sig", "collector"), [(signal.SIGUSR2, "sync"), (signal.SIGTERM, "multi_sync")])
def test_a_signal_to_the_whole_process_group_stops_the_run_with_every_metric_in_the_tracker(
        tmp_path, sig, collector):
    """SLURM and a terminal signal every process of the job: rlrun's children (the MLflow worker,
    collector workers) must outlive the signal so that the main process checkpoints and sends the
    metrics; a child that died of it used to end the run failed (submitit then did not requeue)."""
    from mlflow.tracking import MlflowClient

    args = [a for a in ARGS if not a.startswith(("logger=", "total_frames="))] + [
        "total_frames=6144", f"collector={collector}"]
    proc = spawn(args, tmp_path, start_new_session=True)
    deadline = time.time() + 180
    while time.time() < deadline and not list(tmp_path.glob("runs/*/*/checkpoint.pt")):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    os.killpg(proc.pid, sig)  # as `scancel --signal` / submitit's preemption do: every process
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 128 + int(sig), err
    assert "Traceback" not in err and "tracker" not in err, err  # no metrics left behind
    run_dir = only_run_dir(tmp_path)
    assert summary_of(run_dir)["status"] == "interrupted"
    proc = spawn(args, tmp_path)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("rlrun").experiment_id])
    frames = [m.value for m in client.get_metric_history(run.info.run_id, "frames")]
    assert frames == sorted(set(frames)) and frames[-1] == 6144, frames  # every batch once
