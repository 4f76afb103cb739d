"""Unit tests: SIGTERM decisions and handler wiring, status files, search-space parsing."""

from __future__ import annotations

import signal

import pytest

from rlrun.core.errors import ConfigError
from rlrun.launch import signals
from rlrun.launch.status import find_status, format_table, update_status


@pytest.mark.parametrize(("state", "reason", "action"), [
    ("RUNNING", "", signals.REQUEUE),        # scancel --signal TERM: preemption notice, job goes on
    ("TIMEOUT", "", signals.REQUEUE),        # time limit reached
    ("CANCELLED", "", signals.IGNORE),       # scancel: the user wants it gone
    ("PREEMPTED", "", signals.EXIT),         # SLURM's own preemption: its PreemptMode requeues
    ("COMPLETING", "TimeLimit", signals.REQUEUE),  # scontrol: the controller's reason tells
    ("COMPLETING", "None", signals.IGNORE),
    ("", "", signals.REQUEUE),               # unknown: keep the job's progress
])
def test_sigterm_action(state, reason, action):
    assert signals.sigterm_action(state, reason) == action


def _fake_slurm(monkeypatch, scontrol: tuple[int, str], sacct: tuple[int, str]) -> list[str]:
    """Replaces the two commands ``slurm_job_state`` runs; returns the list of commands run."""
    import subprocess

    ran = []

    def run(cmd, **kwargs):
        ran.append(cmd[0])
        code, out = scontrol if cmd[0] == "scontrol" else sacct
        return subprocess.CompletedProcess(cmd, code, out, "")

    monkeypatch.setattr(signals.subprocess, "run", run)
    return ran


def test_a_cancel_that_accounting_has_not_recorded_yet_is_not_requeued(monkeypatch):
    """The controller says COMPLETING (cancel in flight) while slurmdbd still says RUNNING: the
    controller's view decides. CI saw sacct answer RUNNING, and the cancelled job requeued itself."""
    controller = "JobId=42 JobName=x JobState=COMPLETING Reason=None Dependency=(null)"
    ran = _fake_slurm(monkeypatch, (0, controller), (0, "RUNNING\n"))
    assert signals.slurm_job_state("42") == ("COMPLETING", "None")
    assert signals.sigterm_action(*signals.slurm_job_state("42")) == signals.IGNORE
    assert ran == ["scontrol", "scontrol"]


def test_a_job_the_controller_no_longer_knows_is_looked_up_in_accounting(monkeypatch):
    ran = _fake_slurm(monkeypatch, (1, "slurm_load_jobs error: Invalid job id specified"),
                      (0, "CANCELLED by 0\n"))
    assert signals.slurm_job_state("42") == ("CANCELLED", "")
    assert ran == ["scontrol", "sacct"]
    _fake_slurm(monkeypatch, (1, ""), (1, ""))
    assert signals.slurm_job_state("42") == ("", "")  # neither answers: REQUEUE keeps the progress


class FakeSubmititHandler:
    """Stands in for submitit's SignalHandler (its bound method is what submitit installs)."""

    def __init__(self):
        self.calls = []

    def checkpoint_and_try_requeue(self, signum, frame=None):
        self.calls.append(("requeue", signum))

    def checkpoint_and_exit(self, signum, frame=None):
        self.calls.append(("exit", signum))


@pytest.fixture
def restore_signals():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR2)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


@pytest.mark.parametrize(("state", "expected"), [("RUNNING", [("requeue", signal.SIGTERM)]),
                                                 ("PREEMPTED", [("exit", signal.SIGTERM)]),
                                                 ("CANCELLED", [])])
def test_sigterm_handler_follows_job_state_and_requeues_once(restore_signals, state, expected, capsys):
    fake = FakeSubmititHandler()
    signal.signal(signal.SIGUSR2, fake.checkpoint_and_try_requeue)
    assert signals.install_requeue_handlers("42", state_of=lambda jid: (state, ""))
    on_term, on_usr = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGUSR2)
    on_term(signal.SIGTERM, None)  # what rlrun's chain_signal_handler does after its checkpoint
    assert fake.calls == expected
    # the job's stderr names what the decision was made from
    assert f"[rlrun] SIGTERM with SLURM job state {state!r}" in capsys.readouterr().err
    on_usr(signal.SIGUSR2, None)   # e.g. the SIGTERM that `scontrol requeue` sends: no second requeue
    on_term(signal.SIGTERM, None)
    assert fake.calls == (expected or [("requeue", signal.SIGUSR2)])


def test_no_submitit_handler_leaves_signals_alone(restore_signals):
    signal.signal(signal.SIGUSR2, signal.SIG_DFL)
    assert not signals.install_requeue_handlers("42", state_of=lambda jid: ("RUNNING", ""))
    assert signal.getsignal(signal.SIGTERM) is not None


def test_status_file_merges_and_keeps_the_jobs_state(tmp_path):
    path = tmp_path / "run" / "job.json"
    update_status(path, fresh=True, state="SUBMITTING", job_num=3, run_dir=str(path.parent))
    update_status(path, state="RUNNING", attempt={"pid": 1})      # the job starts first ...
    update_status(path, if_unset_state="PENDING", job_id="77_3")  # ... then the launcher records the id
    update_status(path, attempt={"pid": 2}, frames=512)
    (record,) = find_status(tmp_path)
    assert record["state"] == "RUNNING" and record["job_id"] == "77_3" and record["frames"] == 512
    assert [a["pid"] for a in record["attempts"]] == [1, 2]
    assert "77_3" in format_table([record])
    update_status(path, fresh=True, state="SUBMITTING", job_num=3)  # a new submission starts over
    assert "attempts" not in find_status(tmp_path)[0]


def test_search_space_and_optuna_objects():
    optuna = pytest.importorskip("optuna")
    from rlrun.launch.study import aggregate, build_pruner, build_sampler, distributions

    dists = distributions({"optim.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
                           "trainer.epochs_per_batch": {"low": 2, "high": 10},
                           "model.hidden": {"choices": ["[64,64]", "[256,256]"]}})
    assert isinstance(dists["optim.lr"], optuna.distributions.FloatDistribution) and dists["optim.lr"].log
    assert isinstance(dists["trainer.epochs_per_batch"], optuna.distributions.IntDistribution)
    assert isinstance(dists["model.hidden"], optuna.distributions.CategoricalDistribution)
    assert isinstance(build_pruner({"name": "median", "n_startup_trials": 2}), optuna.pruners.MedianPruner)
    assert isinstance(build_sampler({"name": "random", "seed": 0}), optuna.samplers.RandomSampler)
    assert aggregate([1.0, 2.0, 9.0], "median") == 2.0 and aggregate([1.0, 2.0], "mean") == 1.5
    for bad in ({"optim.lr": {"low": 1}}, {"optim.lr": {"type": "beta", "low": 0, "high": 1}},
                {"optim.lr": {"low": 0.1, "high": 1.0, "lg": True}}, {}):
        with pytest.raises(ConfigError, match="hydra.sweeper.params"):
            distributions(bad)
    with pytest.raises(ConfigError, match="use one of"):
        build_pruner({"name": "medain"})
    with pytest.raises(ConfigError, match="hydra.sweeper.aggregate"):
        aggregate([1.0], "max")
