"""A synthetic MLflow store (SQLite in a temp dir) with known runs, built once per session.

Table 1 cells:
- SAC/HalfCheetah: seeds 0..4 finished at 1M frames, final returns 1000..5000.
- PPO/Hopper: seeds 0, 1 finished at 1M (1500, 1700), seed 2 KILLED at 400k (900), and an
  older KILLED duplicate of seed 1 at 100k (50) that the report must leave out.
- TD3/Ant: seed 0 FINISHED at 600k of 1M frames (a target stop: partial), 2000, no
  ``paper.budget_frames`` param (the budget comes from references.yaml).
Table 2: DT/Hopper seed 0 (1000). Not in a paper table: ppo/cartpole seeds 0, 1 (450, 500;
clip 0.2, sweep tag) and 2 (300; clip 0.1), sac/pendulum seed 0 (-180.5).
Experiment ``other``: ppo/cartpole seed 7 (42).
"""

from __future__ import annotations

import os
import time

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

M = 1_000_000


def log_run(client, exp_id: str, *, algo: str, env: str, seed: int, final: float, frames: int,
            total: int, status: str = "FINISHED", paper: dict | None = None, params: dict | None = None,
            tags: dict | None = None, start: int = 0) -> str:
    """Creates one run as rlrun logs it: tags, params, eval curve, frames, status."""
    from mlflow.entities import Metric, Param

    run = client.create_run(exp_id, start_time=1_700_000_000_000 + start, run_name=f"{algo}-{env}-{seed}",
                            tags={"algo": algo, "env": env, "seed": str(seed),
                                  "run_dir": f"/runs/{algo}-{env}/seed={seed}",
                                  **(tags or {})})
    all_params = {"seed": seed, "total_frames": total, "env.id": env, **(params or {}),
                  **{f"paper.{k}": v for k, v in (paper or {}).items()}}
    client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in all_params.items()])
    now = int(time.time() * 1000)
    steps = [frames * i // 4 for i in range(5)]
    metrics = []
    for i, step in enumerate(steps):
        value = final * i / 4
        metrics += [Metric("eval/episode_return", value, now + i, step),
                    Metric("eval/episode_return_std", 1.0, now + i, step),
                    Metric("frames", step, now + i, step)]
    client.log_batch(run.info.run_id, metrics=metrics)
    client.set_terminated(run.info.run_id, status=status)
    return run.info.run_id


def table1(algo: str, env: str, budget: bool = True) -> dict:
    from rlrun.report.table import references

    mean, std = references()["table1"]["results"][algo][env]
    out = {"table": "table1", "algo": algo, "env": env, "reference_mean": mean, "reference_std": std}
    return {**out, "budget_frames": M} if budget else out


@pytest.fixture(scope="session")
def store(tmp_path_factory) -> str:
    """The tracking URI of the synthetic store."""
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("rlrun", artifact_location=(root / "mlruns").as_uri())
    other = client.create_experiment("other", artifact_location=(root / "mlruns").as_uri())
    for seed in range(5):
        log_run(client, exp, algo="sac", env="halfcheetah", seed=seed, final=1000.0 * (seed + 1),
                frames=M, total=M, paper=table1("SAC", "HalfCheetah"), start=10 + seed)
    hopper = table1("PPO", "Hopper")
    log_run(client, exp, algo="ppo", env="hopper", seed=1, final=50.0, frames=100_000, total=M,
            status="KILLED", paper=hopper, start=1)  # older duplicate of seed 1
    for seed, final, frames, status in ((0, 1500.0, M, "FINISHED"), (1, 1700.0, M, "FINISHED"),
                                        (2, 900.0, 400_000, "KILLED")):
        log_run(client, exp, algo="ppo", env="hopper", seed=seed, final=final, frames=frames, total=M,
                status=status, paper=hopper, start=20 + seed)
    log_run(client, exp, algo="td3", env="ant", seed=0, final=2000.0, frames=600_000, total=M,
            paper=table1("TD3", "Ant", budget=False), start=30)
    log_run(client, exp, algo="dt", env="hopper", seed=0, final=1000.0, frames=50_000, total=50_000,
            paper={"table": "table2", "algo": "DT", "env": "Hopper", "reference_mean": 1048,
                   "reference_std": 226}, start=40)
    for seed, final, clip in ((0, 450.0, 0.2), (1, 500.0, 0.2), (2, 300.0, 0.1)):
        log_run(client, exp, algo="ppo", env="cartpole", seed=seed, final=final, frames=100_000,
                total=100_000, params={"loss.clip_epsilon": clip},
                tags={"sweep": "clip"} if clip == 0.2 else None, start=50 + seed)
    log_run(client, exp, algo="sac", env="pendulum", seed=0, final=-180.5, frames=20_000, total=20_000,
            start=60)
    log_run(client, other, algo="ppo", env="cartpole", seed=7, final=42.0, frames=1000, total=1000, start=70)
    return uri


@pytest.fixture(scope="session")
def runs(store):
    """All runs of the synthetic store, as ``load_runs`` reads them."""
    from rlrun.report.runs import load_runs

    return load_runs(store)
