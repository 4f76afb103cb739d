"""A file system that takes no more bytes ends a run in one message and exit 2, its last
checkpoint intact and no temp file left (issue 25 §5).

The faults are real: a process under ``RLIMIT_FSIZE`` (with SIGXFSZ ignored, so that writes
fail with EFBIG instead of killing it), and, where this machine lets the test mount one, a
tiny tmpfs (ENOSPC). torch's zip writer reports both as a ``RuntimeError`` from
``inline_container.cc`` whose context is the OSError; plain writes raise the OSError.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from cli_utils import summary_of

from rlrun.core import checkpoint
from rlrun.core.checkpoint import WriteError, atomic_write_text, write_error

LIMITED = textwrap.dedent("""
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit then fail with EFBIG
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    sys.argv = sys.argv[1:]
""")

# DQN's checkpoints hold its replay buffer (checkpoint.buffer=true), so they grow with the
# frames (55 bytes a frame on CartPole): about 242 kB at frame 500 and 269 kB at frame 1000.
DQN = ["algo=dqn", "total_frames=1000", "collector.init_random_frames=200", "checkpoint.buffer=true",
       "checkpoint.interval_frames=500", "eval.interval_frames=0", "eval.episodes=1", "logger=csv",
       "progress=false", "threads=1", "hydra.run.dir=run"]
LIMIT = 255_000


def run_limited(code: str, limit: int, args: list[str], cwd: Path,
                timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", LIMITED + textwrap.dedent(code), str(limit), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def lines_of(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


def leftovers(where: Path) -> list[str]:
    return sorted(p.name for p in where.iterdir() if ".tmp" in p.name)


def test_atomic_writes_under_a_real_file_size_limit_keep_the_old_file_and_no_temp(tmp_path):
    """torch.save into a file (a RuntimeError from its zip writer, the EFBIG OSError as its
    context) and a text file (the OSError) both become one WriteError; the file keeps its
    previous content; no temp file stays."""
    code = """
        import json, torch
        from pathlib import Path
        from rlrun.core import checkpoint
        out = {}
        checkpoint.save({"frames": 1, "w": torch.zeros(10)}, "checkpoint.pt")
        checkpoint.atomic_write_text("summary.json", '{"frames": 1}')
        raw = None
        try:
            torch.save({"w": torch.zeros(100_000)}, "raw.pt")
        except Exception as err:
            raw = [type(err).__name__, str(err).splitlines()[0], repr(err.__context__)]
        Path("raw.pt").unlink(missing_ok=True)
        for name, write in [("checkpoint", lambda: checkpoint.save({"frames": 2, "w": torch.zeros(100_000)},
                                                                    "checkpoint.pt")),
                            ("text", lambda: checkpoint.atomic_write_text("summary.json", "x" * 100_000))]:
            try:
                write()
                out[name] = "written"
            except checkpoint.WriteError as err:
                out[name] = err.render()
        out["frames"] = checkpoint.load("checkpoint.pt")["frames"]
        out["summary"] = Path("summary.json").read_text()
        out["raw"] = raw
        print(json.dumps(out))
    """
    done = run_limited(code, 50_000, [], tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    # what torch itself raises on a path: its C++ stream's RuntimeError, no OSError in sight
    assert out["raw"][0] == "RuntimeError" and "inline_container" in out["raw"][1], out["raw"]
    for name, file in (("checkpoint", "checkpoint.pt"), ("text", "summary.json")):
        assert out[name].startswith(f"hydra.run.dir: cannot write {file} in {tmp_path}: over the file size "
                                    f"limit (File too large); the previous {file} is intact"), out[name]
        assert len(out[name].splitlines()) == 2 and "fix: free space under" in out[name]
    assert out["frames"] == 1 and out["summary"] == '{"frames": 1}'
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(("err", "why"), [
    (OSError(errno.ENOSPC, "No space left on device"), "out of space (No space left on device)"),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), "over the disk quota (Disk quota exceeded)"),
    (OSError(errno.EFBIG, "File too large"), "over the file size limit (File too large)"),
    (OSError(errno.EROFS, "Read-only file system"), "a read-only file system (Read-only file system)"),
    # torch.save to a path: its C++ stream fails without an OSError at all
    (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 640 vs 598"),
     "the write failed with"),
])
def test_write_error_names_the_file_its_directory_and_the_reason(tmp_path, err, why):
    mapped = write_error(err, tmp_path / "checkpoint.pt")
    assert isinstance(mapped, WriteError) and mapped.exit_code == 2
    assert mapped.key == "hydra.run.dir"
    assert mapped.message.startswith(f"cannot write checkpoint.pt in {tmp_path}: {why}")
    assert "previous" not in mapped.message  # there was no checkpoint.pt to keep
    on_dir = write_error(err, tmp_path)
    assert on_dir is not None and on_dir.message.startswith(f"cannot write the run directory {tmp_path}: ")


def test_torch_errors_carrying_the_os_error_are_mapped_and_others_are_not(tmp_path):
    wrapped = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 768 vs 662")
    wrapped.__context__ = OSError(errno.ENOSPC, "No space left on device")
    assert "out of space (No space left on device)" in write_error(wrapped, tmp_path / "c.pt").message
    for other in (RuntimeError("shape mismatch"), OSError(errno.ENOENT, "No such file"), ValueError("x")):
        assert write_error(other, tmp_path / "c.pt") is None


def test_a_run_whose_checkpoint_outgrows_the_file_system_stops_in_one_message_and_resumes(tmp_path):
    """The checkpoint at frame 500 fits, the one at 1000 does not: exit 2, one message naming
    the run directory, the frame-500 checkpoint intact, no temp file; with room again the same
    command continues from frame 500 to the end."""
    code = """
        from rlrun.cli.main import main
        sys.exit(main(sys.argv[1:]))
    """
    done = run_limited(code, LIMIT, DQN, tmp_path)
    run_dir = tmp_path / "run"
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "inline_container" not in done.stderr, done.stderr
    lines = lines_of(done.stderr)
    assert len(lines) == 2, done.stderr
    assert lines[0] == (f"rlrun: error: hydra.run.dir: cannot write checkpoint.pt in {run_dir}: over the "
                        "file size limit (File too large); the previous checkpoint.pt is intact"), lines
    assert lines[1].startswith(f"  fix: free space under {run_dir}")
    assert checkpoint.load(run_dir / "checkpoint.pt")["frames"] == 500
    assert leftovers(run_dir) == []
    assert summary_of(run_dir)["status"] == "failed"

    again = subprocess.run([sys.executable, "-m", "rlrun", *DQN], cwd=tmp_path, capture_output=True,
                           text=True, timeout=180)
    assert again.returncode == 0, again.stderr
    assert "resuming from frame 500" in again.stderr
    assert summary_of(run_dir)["frames"] == 1000

    # rlrun export's file too (torch.export's zip writer used to abort the process when it
    # was collected after a failed write: "terminate called after throwing ... c10::Error")
    export = run_limited(code, 20_000, ["export", "run"], tmp_path)
    assert export.returncode == 2, export.stderr
    lines = lines_of(export.stderr)
    assert len(lines) == 2 and "terminate called" not in export.stderr, export.stderr
    assert lines[0] == (f"rlrun: error: --out: cannot write policy.pt2 in {run_dir}: over the file size "
                        "limit (File too large)"), lines
    assert not (run_dir / "policy.pt2").exists() and leftovers(run_dir) == []


def test_a_run_directory_without_room_is_refused_before_anything_is_written(tmp_path):
    """Less room than the run's config files take: one message before Hydra writes its own
    files (which would end in its traceback), naming the directory."""
    code = """
        from rlrun.cli.main import main
        sys.exit(main(sys.argv[1:]))
    """
    done = run_limited(code, 16_000, ["hydra.run.dir=run", "logger=none"], tmp_path, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = lines_of(done.stderr)
    assert len(lines) == 2 and "Traceback" not in done.stderr, done.stderr
    assert lines[0] == "rlrun: error: hydra.run.dir: cannot write the run directory run (File too large)"
    assert not (tmp_path / "run" / ".hydra").exists()


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 1 MB tmpfs, where this process may mount one (root with CAP_SYS_ADMIN); else skip."""
    where = tmp_path / "tmpfs"
    where.mkdir()
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
                                 capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        mounted = False
    if not mounted:
        pytest.skip("cannot mount a tmpfs here (needs root); the RLIMIT_FSIZE tests cover EFBIG")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], timeout=10)


def test_a_full_tmpfs_gives_write_errors_and_keeps_the_previous_files(tiny_tmpfs):
    checkpoint.save({"frames": 1, "w": torch.zeros(50_000)}, tiny_tmpfs / "checkpoint.pt")  # 200 kB
    atomic_write_text(tiny_tmpfs / "config.yaml", "seed: 1\n")
    with open(tiny_tmpfs / "filler", "wb") as f:  # leave ~100 kB
        f.write(bytes(1024 * 1024 - 200 * 1024 - 100 * 1024))
    with pytest.raises(WriteError, match=r"cannot write checkpoint.pt in .*: out of space \(No space left "
                       r"on device\); the previous checkpoint.pt is intact"):
        checkpoint.save({"frames": 2, "w": torch.zeros(50_000)}, tiny_tmpfs / "checkpoint.pt")
    with pytest.raises(WriteError, match="cannot write config.yaml .*: out of space"):
        atomic_write_text(tiny_tmpfs / "config.yaml", "x" * 200_000)
    assert checkpoint.load(tiny_tmpfs / "checkpoint.pt")["frames"] == 1
    assert (tiny_tmpfs / "config.yaml").read_text() == "seed: 1\n"
    assert leftovers(tiny_tmpfs) == []


def test_an_os_error_of_a_logger_file_is_one_message_naming_the_run_directory(tmp_path, capsys,
                                                                               monkeypatch):
    """Files rlrun does not replace atomically (a logger's metrics.csv, appended to) fail through
    the CLI's own mapping: the same one message, not a traceback."""
    from cli_utils import run_cli

    from rlrun.loggers.tracking import CSVLogger

    def full(self, metrics, step):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(CSVLogger, "log_metrics", full)
    code, _, err = run_cli(["total_frames=512", "collector.frames_per_batch=256", "eval.interval_frames=0",
                            "eval.episodes=1", "logger=csv", "progress=false", "threads=1",
                            "hydra.run.dir=run"], tmp_path, capsys)
    assert code == 2, err
    lines = lines_of(err)
    assert len(lines) == 2 and "Traceback" not in err, err
    assert lines[0] == (f"rlrun: error: hydra.run.dir: cannot write the run directory {tmp_path / 'run'}: "
                        "out of space (No space left on device)")
