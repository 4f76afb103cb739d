"""Reading runs from an MLflow store: one row per run, final values, partial runs, curves, errors."""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace

import numpy as np
import pytest

from rlrun.report.runs import COLUMNS, ReportError, eval_curve, load_runs, lookup, normalize_uri


def test_one_row_per_run_across_experiments(runs):
    assert list(runs.columns) == COLUMNS
    assert len(runs) == 16
    assert sorted(runs["experiment"].unique()) == ["other", "rlrun"]


def test_final_values_frames_and_partial_flags(runs):
    sac = runs[runs["tags"].map(lambda t: t["algo"] == "sac" and t["env"] == "halfcheetah")]
    assert sorted(sac["final_return"]) == [1000, 2000, 3000, 4000, 5000]
    assert set(sac["frames"]) == {1_000_000} and set(sac["total_frames"]) == {1_000_000}
    assert not sac["partial"].any() and set(sac["status"]) == {"FINISHED"}
    hopper = runs[runs["tags"].map(lambda t: t["env"] == "hopper" and t["algo"] == "ppo")]
    killed = hopper[hopper["seed"] == "2"].iloc[0]
    assert (killed["status"], killed["frames"], killed["final_return"], killed["partial"]) == (
        "KILLED", 400_000, 900, True)
    ant = runs[runs["tags"].map(lambda t: t["algo"] == "td3")].iloc[0]
    assert ant["status"] == "FINISHED" and ant["partial"]  # frames 600k < total_frames 1M


def test_eval_curve_is_sorted_by_step(runs):
    row = runs[runs["final_return"] == 5000].iloc[0]
    np.testing.assert_array_equal(row["curve_steps"], [0, 250_000, 500_000, 750_000, 1_000_000])
    np.testing.assert_allclose(row["curve_values"], [0, 1250, 2500, 3750, 5000])
    assert lookup(row, "paper.algo") == "SAC" and lookup(row, "algo") == "sac"
    assert lookup(row, "tags.seed") == "4" and lookup(row, "params.seed") == "4"


def test_a_step_logged_twice_keeps_its_latest_value():
    m = lambda step, ts, v: SimpleNamespace(step=step, timestamp=ts, value=v)
    steps, values = eval_curve([m(200, 5, 2.0), m(100, 1, 1.0), m(200, 9, 3.0), m(200, 7, 9.0)])
    assert list(steps) == [100, 200] and list(values) == [1.0, 3.0]


def test_experiment_and_filter_select_runs(store):
    assert len(load_runs(store, ["other"])) == 1
    assert len(load_runs(store, ["rlrun", "other"])) == 16
    assert len(load_runs(store, filter_string="params.`paper.table` = 'table1' and tags.seed = '0'")) == 3
    with pytest.raises(ReportError, match="no experiment named 'nope'.*--experiment"):
        load_runs(store, ["nope"])
    with pytest.raises(ReportError, match="--filter"):
        load_runs(store, filter_string="tags.algo ==== 'x'")


def test_a_missing_store_is_reported_not_created(tmp_path):
    with pytest.raises(ReportError, match="no MLflow store at .*--tracking-uri"):
        load_runs(f"sqlite:///{tmp_path / 'nope.db'}")
    assert not (tmp_path / "nope.db").exists()
    with pytest.raises(ReportError, match="no MLflow store"):
        load_runs(str(tmp_path / "mlruns"))
    with sqlite3.connect(tmp_path / "other.db") as db:
        db.execute("CREATE TABLE foo (x)")
    with pytest.raises(ReportError, match="not an MLflow store"):
        load_runs(str(tmp_path / "other.db"))


def test_bare_paths_become_uris(tmp_path, monkeypatch):
    (tmp_path / "mlflow.db").touch()
    assert normalize_uri(str(tmp_path)) == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert normalize_uri("http://host:5000") == "http://host:5000"
    monkeypatch.chdir(tmp_path)
    assert normalize_uri(None) == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    assert normalize_uri("x.db") == f"sqlite:///{tmp_path.resolve() / 'x.db'}"
