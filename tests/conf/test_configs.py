"""Every config in conf/ composes, resolves, and builds its components."""

from __future__ import annotations

import itertools

import pytest
import torch
from dataset_fakes import random_dataset
from omegaconf import OmegaConf

from rlrun.core import registry
from rlrun.core.agent_groups import algos_for
from rlrun.core.config_schema import validate_sections
from rlrun.core.registry import check_kwargs, lookup
from rlrun.lifecycle.build import build_parts
from rlrun.lifecycle.compose import CONF_DIR, config_groups, register_resolvers
from rlrun.lifecycle.explain import compose_config
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
    run = build_parts(cfg, tmp_path, torch.device("cpu"))
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
    options = [k for k in node.keys() if k not in ("name", "defaults")]
    # interpolations refer to the full config; check keys and literal types only
    literal = {k: v for k in options if not OmegaConf.is_interpolation(node, k)
               for v in [node[k]]}
    check_kwargs(entry.factory, literal, group)


def test_tuned_presets_follow_algo_env_naming():
    for option in GROUPS.get("tuned", []):
        algo, env = split_tuned(option)
        assert algo in ALGOS and env in ENVS, option


COMPONENT_GROUPS = ("loss", "model", "buffer", "optim", "exploration", "collector", "logger")
# Groups whose presets start from their factory's signature wherever that leaves their runs' configs
# unchanged; the others' presets still restate the defaults, which must then agree (below).
FROM_SIGNATURE = ("loss", "model", "buffer", "optim")


def signature_entry(node) -> str | None:
    """``loss/sac`` for a preset whose defaults list starts from ``/signature/loss/sac@_here_``."""
    entries = [e for e in node.get("defaults") or [] if isinstance(e, str) and e.startswith("/signature/")]
    assert len(entries) <= 1, entries
    return entries[0].removeprefix("/signature/").partition("@")[0] if entries else None


def stated(node) -> dict:
    """The options a preset file writes itself (not its name or defaults list)."""
    return {k: _plain(v) for k, v in OmegaConf.to_container(node).items() if k not in ("name", "defaults")}


@pytest.mark.parametrize(("group", "option"),
                         [(g, o) for g, opts in GROUPS.items() for o in opts if g in COMPONENT_GROUPS])
def test_a_default_has_one_home_the_factorys_signature(group, option):
    """A preset names its component, starts from its factory's keyword defaults (the signature node
    ``rlrun.lifecycle.compose`` stores from ``rlrun.core.component_index``) and states only what it sets
    differently. One that does not start from it (it leaves out an option the signature node holds,
    which would change its runs' configs) must at least agree with the factory where it restates."""
    from rlrun.core.component_index import keyword_defaults

    node = OmegaConf.load(CONF_DIR / group / f"{option}.yaml")
    defaults = keyword_defaults(lookup(group, node.name).factory)
    entry, own = signature_entry(node), stated(node)
    if entry is not None:
        assert entry == f"{group}/{node.name}", f"{group}/{option}.yaml starts from another component"
        same = {k: v for k, v in own.items() if k in defaults and v == _plain(defaults[k])
                and not OmegaConf.is_interpolation(node, k)}
        assert not same, f"{group}/{option}.yaml restates its factory's defaults {same}: drop them"
        return
    left_out = set(defaults) - set(own)
    assert group not in FROM_SIGNATURE or left_out, (
        f"{group}/{option}.yaml states every option: start it from its signature "
        f"(defaults: [/signature/{group}/{node.name}@_here_]) and drop the values equal to the defaults")
    if node.name == option:  # a variant (buffer=minibatch of replay) states its differences
        differ = {k: (v, _plain(defaults[k])) for k, v in own.items() if k in defaults
                  and defaults[k] is not None  # None: the preset chooses
                  and not OmegaConf.is_interpolation(node, k) and v != _plain(defaults[k])}
        assert not differ, f"{group}/{option}.yaml disagrees with the factory's defaults: {differ}"


def _plain(value):
    value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    if value == {}:  # YAML's {} keeps the node writable from the command line; None means the same
        return None
    return list(value) if isinstance(value, tuple) else value


@pytest.mark.parametrize("algo", ALGOS)
def test_the_composed_config_shows_every_option_of_each_component(algo):
    """Starting from the signature node, the composed config still holds every option of the
    factory (what ``rlrun --cfg job`` shows, overrides reach and the tracker logs). The node comes
    from the index, which tests/core/test_registry.py keeps equal to the factories' signatures."""
    import inspect

    from hydra import compose, initialize_config_dir

    register_resolvers()  # and the signature nodes
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):  # the choices too, unresolved
        cfg = compose("config", overrides=[f"algo={algo}"], return_hydra_config=True)
    for group in FROM_SIGNATURE:
        node, choice = OmegaConf.to_container(cfg[group]), cfg.hydra.runtime.choices.get(group)
        if choice is None or signature_entry(OmegaConf.load(CONF_DIR / group / f"{choice}.yaml")) is None:
            continue  # written in the algo preset (ppo_kl's loss), or a preset that restates
        params = inspect.signature(lookup(group, node["name"]).factory).parameters
        missing = [k for k, p in params.items() if p.default is not p.empty and k not in node
                   and k not in registry.SUPPLIED_FIX]
        assert not missing, f"algo={algo}: {group} lacks {missing}"


def test_an_option_of_a_signature_node_is_overridden_and_a_misspelt_one_refused():
    """The key comes from the signature node, so ``loss.tau=0.01`` overrides it like any other."""
    loss = composed("algo=sac", "env=pendulum", "loss.tau=0.01").loss
    assert OmegaConf.to_container(loss) == {"name": "sac", "tau": 0.01, "init_alpha": 1.0,
                                            "target_entropy": None, "learn_alpha": True}
    with pytest.raises(Exception, match="tua"):
        composed("algo=sac", "env=pendulum", "loss.tua=0.01")  # Hydra's struct check: no such key


def test_the_run_discount_defaults_to_the_papers_099():
    """One ``gamma`` for every algorithm; GAE and the losses get it from here."""
    assert OmegaConf.load(CONF_DIR / "config.yaml").gamma == 0.99
    assert composed("algo=ppo", "env=cartpole").gamma == 0.98  # tuned/ppo_cartpole.yaml
    assert composed("algo=sac", "env=pendulum").gamma == 0.99
