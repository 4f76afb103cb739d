"""Every config in conf/ composes, resolves, and builds its components."""

from __future__ import annotations

import itertools

import pytest
import torch
from dataset_fakes import random_dataset
from omegaconf import OmegaConf

from rlrun.cli.compose import CONF_DIR, config_groups
from rlrun.cli.explain import compose_config
from rlrun.core.agent_groups import algos_for
from rlrun.core.config_schema import validate_sections
from rlrun.core.registry import check_kwargs, lookup
from rlrun.lifecycle.build import build_run
from rlrun.trainer.loop import Trainer

GROUPS = config_groups()
ALGOS, ENVS = GROUPS["algo"], GROUPS["env"]
CONTINUOUS_ONLY = {"sac", "td3", "ddpg"}
DISCRETE_ONLY = {"dqn"}
OFFLINE = {"iql", "cql", "dt", "odt"}  # learn from a dataset
DISCRETE_ENVS = {"cartpole", "pong", "freeway", "boxing", "breakout"}
ATARI_ENVS = {"pong", "freeway", "boxing", "breakout"}
MARL_ALGOS = set(algos_for("group"))  # agent groups (what their model and loss declare): VMAS envs only
VMAS_ENVS = {e for e in ENVS if e.startswith("vmas/")}
CNN_MODELS = {"ppo": "actor_critic_cnn", "ppo_kl": "actor_critic_cnn", "a2c": "actor_critic_cnn",
              "dqn": "qnet_cnn", "impala": "actor_critic_cnn"}


def split_tuned(option: str) -> tuple[str, str]:
    """``ppo_kl_cartpole -> (ppo_kl, cartpole)``: the longest algo name that prefixes it."""
    algo = max((a for a in ALGOS if option.startswith(f"{a}_")), key=len, default=option.split("_")[0])
    return algo, option[len(algo) + 1:]


def composed(*overrides: str):
    return compose_config(list(overrides))  # as `rlrun explain` composes


@pytest.mark.parametrize(("algo", "env"), list(itertools.product(ALGOS, ENVS)))
def test_every_algo_env_pair_composes_and_builds(algo, env, tmp_path):
    if (algo in MARL_ALGOS) != (env in VMAS_ENVS):
        pytest.skip(f"{algo} and {env} are not both multi-agent (tests/algos/test_marl_errors.py)")
    if (algo in CONTINUOUS_ONLY) == (env in DISCRETE_ENVS) and (algo in CONTINUOUS_ONLY | DISCRETE_ONLY):
        pytest.skip(f"{algo} does not fit {env}'s action space")
    overrides = [f"algo={algo}", f"env={env}"]
    if algo in OFFLINE:  # any dataset of the env's spaces will do
        if env in DISCRETE_ENVS:
            pytest.skip(f"{algo} does not fit {env}'s action space")
        env_id = composed(*overrides, "dataset=x/y-v0").env.id
        random_dataset(env_id, f"test/{env}/random-v0", tmp_path / "data", episodes=2, max_steps=20)
        overrides += [f"dataset=test/{env}/random-v0", f"dataset_root={tmp_path / 'data'}"]
    if env in ATARI_ENVS:  # pixel observations: the CNN variant of the algo's model
        pytest.importorskip("ale_py")
        pytest.importorskip("cv2")
        overrides.append(f"model={CNN_MODELS[algo]}")
    cfg = composed(*overrides, "eval.episodes=1")
    validate_sections(cfg)
    if cfg.buffer.get("capacity") is not None:  # the real size is allocated lazily, but keep it small
        cfg.buffer.capacity = max(1000, cfg.collector.frames_per_batch)
    run = build_run(cfg, tmp_path, torch.device("cpu"))
    try:
        order = Trainer(run.collector, run.loss, run.optimizer, run.hooks, policy=run.policy,
                        provided=run.provided).order  # the hooks' declarations check out
        assert "buffer" in order["process_optim_batch"]
    finally:
        run.collector.shutdown()  # worker processes (impala's multi_async), if any
        run.close()


@pytest.mark.parametrize(("group", "option"),
                         [(g, o) for g, opts in GROUPS.items() for o in opts
                          # sweeps, searches and launchers are not registry components (tests/launch)
                          if g not in ("algo", "env", "paper", "sweep", "hpo") and not g.startswith("hydra")])
def test_every_group_option_names_a_registered_component(group, option):
    if group == "tuned":
        algo, env = split_tuned(option)
        cfg = composed(f"algo={algo}", f"env={env}")
        validate_sections(cfg)
        return
    node = OmegaConf.load(CONF_DIR / group / f"{option}.yaml")
    kind = {"optim": "optim", "logger": "logger"}.get(group, group)
    entry = lookup(kind, node.name)
    options = [k for k in node.keys() if k != "name"]
    # interpolations refer to the full config; check keys and literal types only
    literal = {k: v for k in options if not OmegaConf.is_interpolation(node, k)
               for v in [node[k]]}
    check_kwargs(entry.factory, literal, group)


def test_tuned_presets_follow_algo_env_naming():
    for option in GROUPS.get("tuned", []):
        algo, env = split_tuned(option)
        assert algo in ALGOS and env in ENVS, option


@pytest.mark.parametrize(("group", "option"),
                         [(g, o) for g, opts in GROUPS.items() for o in opts
                          if g in ("loss", "model", "optim", "exploration", "collector", "logger")])
def test_base_presets_restate_their_factory_defaults_exactly(group, option):
    """A default has one home, the factory's signature; a preset named after its component
    restates it for the resolved config and the tracker, and must agree with it."""
    import inspect

    node = OmegaConf.load(CONF_DIR / group / f"{option}.yaml")
    if node.name != option:
        pytest.skip(f"{group}={option} is a variant of {node.name}: it states its differences")
    params = inspect.signature(lookup(group, option).factory).parameters
    differ = {k: (node[k], params[k].default) for k in node if k != "name"
              and not OmegaConf.is_interpolation(node, k) and k in params
              and params[k].default not in (inspect.Parameter.empty, None)  # None: the preset chooses
              and _plain(node[k]) != _plain(params[k].default)}
    assert not differ, f"{group}/{option}.yaml disagrees with the factory's defaults: {differ}"


def _plain(value):
    value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    if value == {}:  # YAML's {} keeps the node writable from the command line; None means the same
        return None
    return list(value) if isinstance(value, tuple) else value


def test_the_run_discount_defaults_to_the_papers_099():
    """One ``gamma`` for every algorithm; GAE and the losses get it from here."""
    assert OmegaConf.load(CONF_DIR / "config.yaml").gamma == 0.99
    assert composed("algo=ppo", "env=cartpole").gamma == 0.98  # tuned/ppo_cartpole.yaml
    assert composed("algo=sac", "env=pendulum").gamma == 0.99
