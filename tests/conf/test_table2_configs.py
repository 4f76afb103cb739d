"""The paper's Table 2 configs: one per cell, Table 9's settings, and each runs a few updates."""

from __future__ import annotations

from importlib.resources import files

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from cli_utils import only_run_dir, run_cli, summary_of

from rlrun.lifecycle.compose import CONF_DIR

TABLE2 = CONF_DIR / "paper" / "table2"
PAPER = sorted(p.stem for p in TABLE2.glob("*.yaml"))
RESULTS = yaml.safe_load((files("rlrun.report") / "references.yaml").read_text())["table2"]["results"]
# Table 9 (hyperparameters.yaml `offline`), written out here
TABLE9 = {
    "iql": {"optim": {"name": "adam", "lr": 3e-4}, "buffer": {"batch_size": 256},
            "model": {"hidden": [256, 256], "critic_hidden": [256, 256], "activation": "relu"},
            "loss": {"value_hidden": [256, 256], "tau": 0.005, "expectile": 0.7, "beta": 3.0}},
    "dt": {"optim": {"name": "lamb", "lr": 1e-4, "weight_decay": 5e-4, "warmup_steps": 10000},
           "buffer": {"batch_size": 64, "slice_len": 20, "rtg_scale": 1000},
           "model": {"hidden": 128, "n_layers": 3, "n_heads": 1, "dropout": 0.1, "head_hidden": [128]}},
    "odt": {"optim": {"name": "lamb", "lr": 1e-4, "weight_decay": 5e-4, "warmup_steps": 10000},
            "buffer": {"batch_size": 256, "slice_len": 20, "rtg_scale": 1000},
            "model": {"hidden": 512, "n_layers": 4, "n_heads": 4, "dropout": 0.1, "head_hidden": [512]},
            "loss": {"init_temperature": 0.1}},
}
TARGET = {"halfcheetah": (6000, 5), "hopper": (3600, 20)}  # target return, eval context


def _load(name: str) -> dict:
    return yaml.safe_load((TABLE2 / f"{name}.yaml").read_text())


def test_one_config_per_table2_cell_with_the_papers_reference_and_budget():
    cells = {(a.lower(), e.lower()) for a, envs in RESULTS.items() for e in envs}
    assert {tuple(n.split("_", 1)) for n in PAPER} == cells
    for name in PAPER:
        cfg, (algo, env) = _load(name), name.split("_", 1)
        ref = RESULTS[cfg["paper"]["algo"]][cfg["paper"]["env"]]
        assert [cfg["paper"]["reference_mean"], cfg["paper"]["reference_std"]] == ref
        assert cfg["paper"]["table"] == "table2" and cfg["total_updates"] == 50000
        assert cfg["dataset"] == f"rlrun/{env}/medium-replay-v0"
        assert cfg["defaults"] == [{"override /algo": algo}, {"override /env": env}]
        for section, values in TABLE9[algo].items():
            assert {k: cfg[section][k] for k in values} == values, (name, section)
        if algo != "iql":
            assert (cfg["model"]["target_return"], cfg["model"]["eval_context"]) == TARGET[env]
        text = (TABLE2 / f"{name}.yaml").read_text()  # the choices where the paper contradicts itself
        assert "medium-replay" in text and f"{env}-medium-v2" in text and "v5" in text


def _tiny_dataset(root, env: str) -> None:
    """Random-policy episodes of the env under the Table 2 dataset id (the configs' own)."""
    from rlrun.datasets.minari_format import Episode, write_dataset

    gym_env = gym.make({"halfcheetah": "HalfCheetah-v5", "hopper": "Hopper-v5"}[env], max_episode_steps=30)
    gym_env.action_space.seed(0)
    episodes = []
    for i in range(4):
        obs, _ = gym_env.reset(seed=i)
        o, a, r, te, tr = [obs], [], [], [], []
        while not (te and (te[-1] or tr[-1])):
            action = gym_env.action_space.sample()
            obs, reward, term, trunc, _ = gym_env.step(action)
            # distinct returns per episode (IQL's reward scale divides by their spread)
            o.append(obs), a.append(action), r.append(reward + i), te.append(term), tr.append(trunc)
        episodes.append(Episode(np.array(o), np.array(a), np.array(r), np.array(te), np.array(tr)))
    write_dataset(f"rlrun/{env}/medium-replay-v0", episodes, gym_env.observation_space,
                  gym_env.action_space, env_spec=gym_env.spec, root=root)


# a few updates of each config on a tiny dataset: its own optimiser (DT/oDT: lamb), a tiny model
TINY = ["total_updates=20", "buffer.batch_size=16", "eval.episodes=1", "eval.max_envs=1",
        "eval.interval_updates=0", "checkpoint.interval_updates=0", "logger=none", "env.max_episode_steps=30"]
TINY_MODEL = {"iql": [], "dt": ["model.hidden=16", "model.n_layers=1", "model.head_hidden=[16]"],
              "odt": ["model.hidden=16", "model.n_layers=1", "model.head_hidden=[16]",
                      # both phases: 2 offline rounds of 5 updates, then 2 online rounds
                      "online.offline_updates=10", "online.updates_per_round=5", "online.max_steps=30"]}


@pytest.mark.parametrize("name", PAPER)
def test_each_table2_config_runs_a_few_updates(name, tmp_path, capsys, monkeypatch):
    algo, env = name.split("_", 1)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    _tiny_dataset(tmp_path / "datasets", env)
    code, _, err = run_cli([f"+paper=table2/{name}", *TINY, *TINY_MODEL[algo]], tmp_path, capsys)
    assert code == 0, err
    run_dir = only_run_dir(tmp_path)
    summary = summary_of(run_dir)
    assert summary["status"] == "finished" and summary["optim_steps"] == 20
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert cfg["optim"]["name"] == TABLE9[algo]["optim"]["name"]  # the config's optimiser, not overridden
    if algo == "odt":
        state = torch.load(run_dir / "checkpoint.pt", weights_only=False)
        # 4 rounds: 2 offline (no env steps), 2 online that each collected one episode per sub-env
        assert state["collector"]["rounds"] == 4  # the schedule's one record: past the 2 offline
        assert 0 < summary["frames"] <= 2 * 30 and len(state["buffer"]["episodes"]) == 4 + 2
    else:
        assert summary["frames"] == 0
