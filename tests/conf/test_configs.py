"""Every config in conf/ composes, resolves, and builds its components."""

from __future__ import annotations

import itertools

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf, open_dict

from rlrun.cli import CONF_DIR, config_groups, register_resolvers
from rlrun.registry import build, check_kwargs, lookup
from rlrun.run import validate

GROUPS = config_groups()
ALGOS, ENVS = GROUPS["algo"], GROUPS["env"]
CONTINUOUS_ONLY = {"sac", "td3", "ddpg"}
DISCRETE_ONLY = {"dqn"}
DISCRETE_ENVS = {"cartpole", "pong", "freeway", "boxing", "breakout"}
ATARI_ENVS = {"pong", "freeway", "boxing", "breakout"}
CNN_MODELS = {"ppo": "actor_critic_cnn", "a2c": "actor_critic_cnn", "dqn": "qnet_cnn"}


def composed(*overrides: str):
    register_resolvers()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # so ${hydra:...} interpolations resolve
    with open_dict(cfg):
        del cfg["hydra"]
    OmegaConf.resolve(cfg)
    return cfg


@pytest.mark.parametrize(("algo", "env"), list(itertools.product(ALGOS, ENVS)))
def test_every_algo_env_pair_composes_and_builds(algo, env):
    if (algo in CONTINUOUS_ONLY) == (env in DISCRETE_ENVS) and (algo in CONTINUOUS_ONLY | DISCRETE_ONLY):
        pytest.skip(f"{algo} does not fit {env}'s action space")
    overrides = [f"algo={algo}", f"env={env}"]
    if env in ATARI_ENVS:  # pixel observations: the CNN variant of the algo's model
        pytest.importorskip("ale_py")
        pytest.importorskip("cv2")
        overrides.append(f"model={CNN_MODELS[algo]}")
    cfg = composed(*overrides)
    validate(cfg)
    spec_env = build("env", cfg.env)
    try:
        models = build("model", cfg.model, spec=spec_env.spec)
        loss = build("loss", cfg.loss, models=models, spec=spec_env.spec)
        build("optim", cfg.optim, param_groups=loss.param_groups())
        exploration = build("exploration", cfg.exploration, actor=models.actor, spec=spec_env.spec,
                            num_envs=spec_env.num_envs) if cfg.get("exploration") else None
        build("collector", cfg.collector, env=spec_env, actor=models.actor, exploration=exploration,
              total_frames=cfg.total_frames)
        if cfg.get("buffer"):
            build("buffer", {**cfg.buffer, "capacity": 1000}, key="buffer")
        for name, node in cfg.hooks.items():
            build("hook", node, key=f"hooks.{name}")
    finally:
        spec_env.close()


@pytest.mark.parametrize(("group", "option"),
                         [(g, o) for g, opts in GROUPS.items() for o in opts
                          # sweeps, searches and launchers are not registry components (tests/launch)
                          if g not in ("algo", "env", "paper", "sweep", "hpo") and not g.startswith("hydra")])
def test_every_group_option_names_a_registered_component(group, option):
    if group == "tuned":
        algo, env = option.split("_", 1)
        cfg = composed(f"algo={algo}", f"env={env}")
        validate(cfg)
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
        algo, env = option.split("_", 1)
        assert algo in ALGOS and env in ENVS, option
