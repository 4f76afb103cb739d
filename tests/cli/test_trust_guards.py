"""Each trust guard alone, with a hostile config and nothing in front of it (issue 45.2).

rlrun's loaders have two lines of defence: ``check_loaded`` refuses a saved config that would run
code, and ``restore`` builds it with the registry in untrusted mode. A guard whose only test goes
through the other is untested, so each is called directly here; and ``trust_code`` /
``--trust-code`` is shown to accept a ``_target_`` component (not only ``env.imports``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cli_utils import run_cli
from omegaconf import OmegaConf

import rlrun
from rlrun.core import registry
from rlrun.core.errors import CheckpointError, ConfigError
from rlrun.lifecycle.load import CODE_KEYS, check_loaded, restore, write_policy_file

CALLS: list[dict] = []


def recorder(**kwargs):
    """What a hostile ``_target_`` points at: any call is recorded (and would be a breach)."""
    CALLS.append(kwargs)
    return kwargs


HOSTILE = {"_target_": f"{__name__}.recorder", "x": 1}


@pytest.fixture
def composed(tmp_path, monkeypatch):
    """A PPO/CartPole config as a run saves it (resolved), and its policy's fresh state."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from rlrun.lifecycle.compose import CONF_DIR, register_resolvers

    monkeypatch.chdir(tmp_path)
    register_resolvers()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["algo=ppo", "env=cartpole", "logger=none"],
                      return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        with open_dict(cfg):
            del cfg["hydra"]
    cfg = OmegaConf.create(OmegaConf.to_yaml(cfg, resolve=True))
    env = registry.build("env", {**OmegaConf.to_container(cfg.env), "num_envs": 1}, key="env")
    policy = registry.build("model", cfg.model, spec=env.spec)
    env.close()
    CALLS.clear()
    return cfg, policy


def _model_by_target(cfg):
    """``cfg`` with its model built through ``_target_`` (the registered factory's import path)."""
    factory = registry.lookup("model", cfg.model.name).factory
    node = {**OmegaConf.to_container(cfg.model), "_target_": f"{factory.__module__}.{factory.__qualname__}"}
    node.pop("name")
    out = cfg.copy()
    OmegaConf.update(out, "model", node, merge=False)
    return out


# -- the loaded-file check, alone ----------------------------------------------------------------

@pytest.mark.parametrize("code_key", CODE_KEYS)
@pytest.mark.parametrize("where", ["model", "env", "exploration", "model.actor.net", "hooks.x"])
def test_check_loaded_refuses_every_code_key_anywhere(composed, code_key, where):
    cfg, _ = composed
    OmegaConf.update(cfg, where, {code_key: "os.system", "command": "true"}, merge=False)
    with pytest.raises(CheckpointError) as err:
        check_loaded(cfg, "hostile.pt")
    assert err.value.key == f"{where}.{code_key}" and "hostile.pt" in err.value.message


@pytest.mark.parametrize(("edit", "key"), [
    (lambda c: OmegaConf.update(c, "env.imports", ["os"], merge=False), "env.imports[0]"),
    (lambda c: OmegaConf.update(c, "env.id", "os:CartPole-v1"), "env.id"),
    (lambda c: OmegaConf.update(c, "model.hidden", "${oc.env:HOME}"), "model.hidden"),
    (lambda c: OmegaConf.update(c, "hooks", {"h": [{"_target_": "os.system"}]}, merge=False),
     "hooks.h[0]._target_"),
])
def test_check_loaded_refuses_imports_and_interpolations(composed, edit, key):
    cfg, _ = composed
    edit(cfg)
    with pytest.raises(CheckpointError) as err:
        check_loaded(cfg, "hostile.pt")
    assert err.value.key == key


def test_check_loaded_accepts_a_clean_config_and_a_trusted_one(composed, capsys):
    cfg, _ = composed
    check_loaded(cfg, "clean.pt")  # nothing to refuse
    OmegaConf.update(cfg, "model", HOSTILE, merge=False)
    check_loaded(cfg, "mine.pt", trust_code=True)
    assert "trust_code: mine.pt runs _target_" in capsys.readouterr().err


# -- restore's own guard, with no check in front of it ---------------------------------------------

@pytest.mark.parametrize("where", ["model", "exploration"])
def test_restore_refuses_a_target_it_was_handed_unchecked(composed, where):
    """The second line alone: a caller that skipped ``check_loaded`` still cannot import or call."""
    cfg, policy = composed
    OmegaConf.update(cfg, where, HOSTILE, merge=False)
    with pytest.raises(ConfigError) as err:
        restore(cfg, {"policy": policy.state_dict()}, torch.device("cpu"))
    assert err.value.key == f"{where}._target_" and "loaded config" in err.value.message
    assert CALLS == []


def test_restore_refuses_a_target_in_the_env(composed):
    cfg, policy = composed
    OmegaConf.update(cfg, "env", HOSTILE, merge=False)
    with pytest.raises(ConfigError) as err:
        restore(cfg, {"policy": policy.state_dict()}, torch.device("cpu"))
    assert err.value.key == "env._target_" and CALLS == []


def test_restore_builds_a_target_component_when_trusted(composed):
    cfg, policy = composed
    trusted = _model_by_target(cfg)
    with pytest.raises(ConfigError):
        restore(trusted, {"policy": policy.state_dict()}, torch.device("cpu"))
    got, env = restore(trusted, {"policy": policy.state_dict()}, torch.device("cpu"), trust_code=True)
    env.close()
    assert all(torch.equal(a, b) for a, b in zip(got.state_dict().values(), policy.state_dict().values()))


# -- trust_code=True and --trust-code accept a _target_ component, end to end ---------------------

@pytest.fixture
def target_policy_file(composed, tmp_path) -> Path:
    cfg, policy = composed
    (tmp_path / "run").mkdir()
    return write_policy_file(tmp_path / "run", _model_by_target(cfg), policy, frames=7)


def test_load_refuses_then_accepts_a_target_model_with_trust_code(target_policy_file, capsys):
    with pytest.raises(CheckpointError) as err:
        rlrun.load(target_policy_file)
    assert err.value.key == "model._target_"
    pi = rlrun.load(target_policy_file, trust_code=True)
    assert pi.frames == 7 and pi([0.0, 0.0, 0.0, 0.0]) in (0, 1)
    assert "trust_code" in capsys.readouterr().err


def test_export_trust_code_flag_accepts_a_target_model(target_policy_file, tmp_path, capsys):
    code, _, err = run_cli(["export", str(target_policy_file)], tmp_path, capsys)
    assert code == 2 and "model._target_" in err
    code, _, err = run_cli(["export", str(target_policy_file), "--trust-code", "--out",
                            str(tmp_path / "p.pt2")], tmp_path, capsys)
    assert code == 0, err
    assert (tmp_path / "p.pt2").exists()


def test_check_loaded_counts_the_other_offending_keys(composed):
    """One line names the first key and how many more there are (a mutant said '(and 0 more)')."""
    cfg, _ = composed
    OmegaConf.update(cfg, "model", HOSTILE, merge=False)
    with pytest.raises(CheckpointError) as err:
        check_loaded(cfg, "hostile.pt")
    assert "more)" not in err.value.message
    OmegaConf.update(cfg, "env.imports", ["os", "sys"], merge=False)
    with pytest.raises(CheckpointError) as err:
        check_loaded(cfg, "hostile.pt")
    assert err.value.message.count("(and 2 more)") == 1


def test_a_policy_file_is_built_from_its_own_config_not_a_config_yaml_beside_it(composed, tmp_path):
    """``config.yaml`` is read only for a file that holds no config: beside a ``policy.pt`` that holds
    its own, a config.yaml that says something else (here: a hostile one) is not read at all."""
    from rlrun.lifecycle.load import read

    cfg, policy = composed
    (tmp_path / "run").mkdir()
    OmegaConf.update(cfg, "seed", 123)
    file = write_policy_file(tmp_path / "run", cfg, policy, frames=7)
    beside = cfg.copy()
    OmegaConf.update(beside, "seed", 5)
    OmegaConf.update(beside, "model", HOSTILE, merge=False)
    (tmp_path / "run" / "config.yaml").write_text(OmegaConf.to_yaml(beside))
    state, got = read(file)
    assert got.seed == 123 and got.model.name == cfg.model.name and state["frames"] == 7


def test_a_policy_file_without_a_config_is_built_from_the_config_yaml_beside_it(composed, tmp_path):
    """The other side of the rule above: a file that holds no config takes its run's config.yaml."""
    from rlrun.lifecycle.load import read

    cfg, policy = composed
    (tmp_path / "run").mkdir()
    file = write_policy_file(tmp_path / "run", cfg, policy, frames=7)
    state = torch.load(file, weights_only=True)
    del state["config"]
    torch.save(state, file)
    OmegaConf.update(cfg, "seed", 5)
    (tmp_path / "run" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    _, got = read(file)
    assert got.seed == 5


def test_a_policy_file_without_its_weights_is_refused_by_the_schema(composed, tmp_path):
    """The file's ``policy`` field is required: the schema refuses the file in one line (key ``path``)."""
    from rlrun.lifecycle.load import read

    cfg, policy = composed
    (tmp_path / "run").mkdir()
    file = write_policy_file(tmp_path / "run", cfg, policy, frames=7)
    state = torch.load(file, weights_only=True)
    del state["policy"]
    torch.save(state, file)
    with pytest.raises(CheckpointError) as err:
        read(file)
    assert err.value.key == "path" and "policy" in err.value.message
