"""Optuna search: pruning on evaluation returns, several seeds per trial, shared study, best rerun."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_utils import run_cli
from launch_utils import read_json
from omegaconf import OmegaConf

optuna = pytest.importorskip("optuna")

from rlrun.launch.__main__ import main as launch_main  # noqa: E402
from rlrun.launch.study import STUDY_ATTR, get_storage  # noqa: E402

# PPO CartPole, 2048 frames per run, an evaluation every 512 frames reported to the trial
SEARCH = ["-m", "+hpo=ppo_cartpole", "total_frames=2048", "collector.frames_per_batch=256",
          "eval.interval_frames=512", "eval.episodes=2", "logger=none", "progress=false",
          "hydra.sweeper.pruner.n_startup_trials=2", "hydra.sweeper.pruner.n_warmup_steps=0"]


def _study(sweep_dir: Path, name: str = "ppo_cartpole"):
    return optuna.load_study(study_name=name, storage=get_storage(f"sqlite:///{sweep_dir / 'study.db'}"))


@pytest.mark.timeout(900)
def test_search_prunes_and_best_trial_reruns_from_its_saved_config(tmp_path, capsys):
    """2 PPO hyperparameters, 6 trials x 2 seeds, median pruning; then the best trial's config again."""
    sweep = tmp_path / "hpo"
    code, _, err = run_cli([*SEARCH, "hydra.sweeper.n_trials=6", f"hydra.sweep.dir={sweep}"], tmp_path,
                           capsys)
    assert code == 0, err[-3000:]
    study = _study(sweep)
    trials = study.get_trials()
    states = [t.state for t in trials]
    assert len(trials) == 6 and set(states) <= {optuna.trial.TrialState.COMPLETE,
                                                  optuna.trial.TrialState.PRUNED}
    assert states.count(optuna.trial.TrialState.PRUNED) >= 1, states  # fixed seeds: reproducible
    assert study.user_attrs[STUDY_ATTR]["metric"] == "eval/episode_return"
    for t in trials:
        assert set(t.params) == {"optim.lr", "loss.clip_epsilon"}
        assert t.intermediate_values and min(t.intermediate_values) == 512  # reported per evaluation
        runs = [read_json(Path(d) / "summary.json") for d in t.user_attrs["run_dirs"]]
        assert [r["frames"] < 2048 for r in runs] == [t.state == optuna.trial.TrialState.PRUNED] * 2
        if t.state == optuna.trial.TrialState.COMPLETE:  # the value: mean of the seeds' final returns
            assert t.value == pytest.approx(sum(r["eval/episode_return"] for r in runs) / 2)
        else:  # stopped in the batch of the evaluation that pruned it, not one batch later
            assert {r["stop_reason"] for r in runs} == {"pruned"}
            assert all(r["frames"] % 512 == 0 for r in runs), [r["frames"] for r in runs]
            assert max(t.intermediate_values) == max(r["frames"] for r in runs)

    best = OmegaConf.to_container(OmegaConf.load(sweep / "best.yaml"))
    assert best["trial"] == study.best_trial.number and best["value"] == study.best_value
    trial_run = Path(best["run_dirs"][0])  # seed 0 of the best trial
    assert launch_main(["best", str(sweep)]) == 0
    rerun = sweep / "best" / "seed_0"
    summary = read_json(rerun / "summary.json")
    assert summary["status"] == "finished" and summary["frames"] == 2048
    saved = OmegaConf.load(trial_run / "config.yaml")
    again = OmegaConf.load(rerun / "config.yaml")
    assert "optuna_pruning" in saved.hooks and "optuna_pruning" not in again.hooks
    saved.hooks.pop("optuna_pruning")
    assert again == saved  # the same config ...
    # ... and, with a fixed seed on CPU, the same result
    assert summary["eval/episode_return"] == read_json(trial_run / "summary.json")["eval/episode_return"]
    assert launch_main(["best", str(sweep), "--seed", "1", "total_frames=1024", "--dry-run"]) == 0
    assert "total_frames: 1024" in capsys.readouterr().out


def test_study_is_shared_and_continued_by_later_drivers(tmp_path, capsys):
    """A second driver on the same study adds trials up to n_trials (how parallel or SLURM drivers share)."""
    args = [*SEARCH, "total_frames=512", "eval.interval_frames=256", "hydra.sweeper.seeds=[0]",
            f"hydra.sweep.dir={tmp_path / 'hpo'}"]
    code, _, err = run_cli([*args, "hydra.sweeper.n_trials=2"], tmp_path, capsys)
    assert code == 0, err[-3000:]
    code, _, err = run_cli([*args, "hydra.sweeper.n_trials=3"], tmp_path, capsys)
    assert code == 0, err[-3000:]
    trials = _study(tmp_path / "hpo").get_trials()
    assert [t.number for t in trials] == [0, 1, 2]
    assert sorted(p.name for p in (tmp_path / "hpo").glob("trial_*")) == ["trial_0000", "trial_0001",
                                                                           "trial_0002"]


def test_pruning_hook_stops_a_run_the_trial_prunes(tmp_path, capsys):
    """The hook alone, on any run: a threshold no return reaches prunes at the first evaluation."""
    db = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="s", storage=get_storage(db), direction="maximize")
    study.set_user_attr(STUDY_ATTR, {"pruner": {"name": "threshold", "lower": 1e9},
                                     "metric": "eval/episode_return"})
    trial = study.ask()
    code, _, err = run_cli(["total_frames=4096", "collector.frames_per_batch=256", "eval.interval_frames=512",
                            "eval.episodes=1", "logger=none", "hydra.run.dir=run",
                            f"+hooks.optuna_pruning={{name:optuna_pruning,storage:'{db}',study_name:s,"
                            f"trial:{trial.number}}}"], tmp_path, capsys)
    assert code == 0, err
    summary = read_json(tmp_path / "run" / "summary.json")
    assert summary["status"] == "finished" and summary["stop_reason"] == "pruned"
    assert summary["frames"] == 512  # evaluated, reported and pruned in the same batch
    reported = optuna.load_study(study_name="s", storage=get_storage(db)).trials[0].intermediate_values
    assert list(reported) == [512]


def test_search_rejects_sweeps_and_a_launcher_that_does_not_wait(tmp_path, capsys):
    code, _, err = run_cli([*SEARCH, "optim.eps=1e-5,1e-8", f"hydra.sweep.dir={tmp_path / 'a'}"], tmp_path,
                           capsys)
    assert code != 0 and "single values" in err
    code, _, err = run_cli([*SEARCH, "hydra/launcher=slurm", "hydra.launcher.wait=false",
                            f"hydra.sweep.dir={tmp_path / 'b'}"], tmp_path, capsys)
    assert code != 0 and "hydra.launcher.wait" in err
