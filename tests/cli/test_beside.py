"""A single run's config is composed in a forked process while the command imports torch
(``rlrun.cli.beside``): the same config, the same errors, and a bad input ends the command
without waiting for the import."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlrun.cli import beside


def test_the_work_runs_in_another_process_at_the_same_time_as_meanwhile(tmp_path):
    """The child waits for a file that only ``meanwhile`` makes: done one after the other, in
    either order, the child would time out."""
    flag = tmp_path / "meanwhile-started"

    def work():
        deadline = time.monotonic() + 60
        while not flag.exists():
            if time.monotonic() > deadline:
                return "timed out"
            time.sleep(0.01)
        return {"pid": os.getpid()}

    def meanwhile():
        flag.touch()
        time.sleep(0.3)

    result = beside.beside(work, meanwhile)
    assert result != "timed out" and result["pid"] != os.getpid()


def test_what_the_child_cannot_settle_is_handed_back():
    def broken():
        raise ValueError("a bug")

    def unpicklable():
        return lambda: None

    for work in (broken, unpicklable):
        assert beside.beside(work, lambda: None) is beside.AGAIN


@pytest.mark.parametrize(("outcome", "code"), [("return 2", 2), ("sys.exit(1)", 1)])
def test_an_exit_code_of_the_child_ends_the_parent_in_the_middle_of_meanwhile(outcome, code):
    """The child reports its error and the parent ends with its code at once, though what it was
    doing meanwhile (torch's import, here 60 s of sleep) is far from done."""
    script = textwrap.dedent(f'''
        import sys, time
        from rlrun.cli.beside import beside

        def work():
            print("rlrun: error: x: bad", file=sys.stderr)
            {outcome}

        beside(work, lambda: time.sleep(60))
        print("not reached")
    ''')
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert time.monotonic() - start < 30
    assert done.returncode == code and done.stdout == "", done.stderr
    assert done.stderr == "rlrun: error: x: bad\n"


def _compose(argv: list[str]):
    from rlrun.cli.single import _compose as compose

    return compose(argv)


def test_the_composed_config_survives_the_trip_between_processes_unchanged(tmp_path, monkeypatch):
    """Pickled, Hydra's config keeps every value, interpolation and flag (struct, read-only)."""
    monkeypatch.chdir(tmp_path)
    cfg = _compose(["algo=sac", "env=pendulum", "seed=3", "logger=none"])
    back = pickle.loads(pickle.dumps(cfg, protocol=pickle.HIGHEST_PROTOCOL))
    assert OmegaConf.to_yaml(back) == OmegaConf.to_yaml(cfg)
    for a, b in ((cfg, back), (cfg.hydra, back.hydra), (cfg.hydra.runtime, back.hydra.runtime)):
        assert [OmegaConf.is_struct(a), OmegaConf.is_readonly(a)] == [OmegaConf.is_struct(b),
                                                                      OmegaConf.is_readonly(b)]


def _run(tmp_path: Path, args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlrun", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env={**os.environ, **env})


def test_a_run_composed_beside_writes_the_same_config_files_as_one_composed_in_process(tmp_path):
    args = ["total_frames=256", "progress=false", "logger=none", "seed=5"]
    forked = _run(tmp_path, [*args, "hydra.run.dir=forked"], **{beside.BESIDE_ENV: "1"})
    serial = _run(tmp_path, [*args, "hydra.run.dir=serial"], **{beside.BESIDE_ENV: "0"})
    assert forked.returncode == serial.returncode == 0, forked.stderr + serial.stderr
    for name in ("config.yaml", ".hydra/config.yaml", ".hydra/overrides.yaml"):
        a, b = (tmp_path / "forked" / name).read_text(), (tmp_path / "serial" / name).read_text()
        assert a.replace("forked", "serial") == b, name
    hydra = [(tmp_path / d / ".hydra/hydra.yaml").read_text().replace("forked", "serial")
             for d in ("forked", "serial")]
    assert hydra[0] == hydra[1]


def test_a_bad_input_ends_the_command_before_torch_is_imported(tmp_path):
    """The command's own import of torch is replaced by 60 s of sleep: a bad key still ends it
    at once, with the one-line error, once."""
    script = ("import sys, time; import rlrun.cli.single as s; s._import_training = lambda: time.sleep(60); "
              "import rlrun.cli.main as m; sys.exit(m.main())")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script, "trainer.epochs=3"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, beside.BESIDE_ENV: "1"})
    assert time.monotonic() - start < 45
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("rlrun: error: trainer.epochs:") == 1 and "Traceback" not in done.stderr


@pytest.mark.parametrize(("loadavg", "cores", "spare"), [("0.5 0.4 0.3 1/180 99", 2, True),
                                                        ("1.9 1.5 1.2 2/180 99", 2, False),
                                                        ("3.0 2.0 1.0 3/180 99", 4, True),
                                                        ("0.1 0.1 0.1 1/180 99", 1, False)])
def test_the_fork_is_made_only_when_a_core_is_free_for_it(tmp_path, monkeypatch, loadavg, cores, spare):
    path = tmp_path / "loadavg"
    path.write_text(loadavg)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert beside.spare_core(str(path)) is spare


def test_the_setting_decides_over_the_cores(monkeypatch):
    monkeypatch.setattr(beside, "spare_core", lambda: False)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    for setting, forks in (("1", True), ("0", False), ("", False)):
        monkeypatch.setenv(beside.BESIDE_ENV, setting)
        assert beside.available() is forks
    monkeypatch.setattr(beside, "spare_core", lambda: True)
    monkeypatch.setenv(beside.BESIDE_ENV, "")
    assert beside.available()
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    assert not beside.available()
