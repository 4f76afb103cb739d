"""Ctrl-C and SIGTERM: one line, exit 128 + signal, a checkpoint, and the same command continues."""

from __future__ import annotations

import signal
import sys
import time

import pytest
import torch
from cli_utils import only_run_dir, spawn, summary_of

from rlrun import signals

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
