"""Bad config values are refused when the config is checked, naming the key (issue 25 §6)."""

from __future__ import annotations

import inspect
import typing

import pytest
from cli_utils import run_cli

from rlrun.core import registry


@pytest.mark.parametrize("algo", ["ppo", "sac", "dqn", "mappo", "qmix"])
@pytest.mark.parametrize("override, key", [("model.activation=sigmoidx", "model.activation"),
                                           ("model.hidden=[-3]", "model.hidden")])
def test_network_options_are_checked_before_anything_is_built(tmp_path, capsys, algo, override, key):
    env = "env=vmas/navigation" if algo in ("mappo", "qmix") else ""
    code, _, err = run_cli([f"algo={algo}", *filter(None, [env]), override, "logger=none"], tmp_path, capsys)
    assert code == 2, err
    assert key in err and "Traceback" not in err and "KeyError" not in err
    assert not list(tmp_path.rglob("checkpoint.pt"))


def _hints(factory) -> dict:
    target = factory.__init__ if isinstance(factory, type) else factory
    return typing.get_type_hints(target, include_extras=True)


def _has_range(hint) -> bool:
    if typing.get_origin(hint) is typing.Annotated:
        return any(isinstance(m, registry.Range) for m in typing.get_args(hint)[1:])
    return any(_has_range(a) for a in typing.get_args(hint))


def test_every_registered_activation_and_width_option_declares_its_values():
    """The class, not the instance: an ``activation`` option of any registered factory is a
    ``Literal`` and a ``hidden`` width list carries a range, so no new component can bring
    back the KeyError / negative-dimension traceback."""
    missing = []
    for entry in registry.entries():
        for name, hint in _hints(entry.factory).items():
            if "activation" in name and typing.get_origin(hint) is not typing.Literal:
                missing.append(f"{entry.kind}/{entry.name}.{name}: {hint}")
            if name.endswith("hidden") and not _has_range(hint):
                missing.append(f"{entry.kind}/{entry.name}.{name}: {hint}")
    assert not missing, missing


def _numeric(hint) -> bool:
    if hint in (int, float):
        return True
    return any(_numeric(a) for a in typing.get_args(hint) if not isinstance(a, registry.Range))


def _declared(hint) -> bool:
    """A range (``Annotated[..., Range]``) or a set of values (``Literal``) on every numeric arm."""
    origin = typing.get_origin(hint)
    if origin is typing.Literal or _has_range(hint):
        return True
    return bool(typing.get_args(hint)) and origin is not typing.Annotated and all(
        _declared(a) or not _numeric(a) for a in typing.get_args(hint))


# Numeric options with no range, each for a reason. Keep this list short and say why.
UNBOUNDED = {
    # any real number is meaningful
    "loss/cql.target_entropy", "loss/sac.target_entropy", "loss/odt.target_entropy",  # null: -action dim
    "model/dt.target_return",                     # conditioned-on return, in env units (negative too)
    "model/actor_critic.init_log_std", "model/group_actor_critic.init_log_std",  # a log: any real
    "exploration/ornstein_uhlenbeck.mu",          # the noise's mean
    "buffer/dataset.reward_shift",                # added to rewards
}
# Passed in by rlrun, never set in a component's node (checked at the top level: gamma, seed, ...).
SUPPLIED = {*registry.SUPPLIED_FIX, "num_envs@exploration", "resume_step@logger"}


def unranged_numeric_options() -> list[str]:
    """``kind/name.option`` for every numeric option of a registered factory without a declared
    range or value set, less the commented exemptions above."""
    missing = []
    for entry in registry.entries():
        params = inspect.signature(entry.factory).parameters
        for name, hint in _hints(entry.factory).items():
            where = f"{entry.kind}/{entry.name}.{name}"
            if (name not in params or name in SUPPLIED or f"{name}@{entry.kind}" in SUPPLIED
                    or where in UNBOUNDED):
                continue
            if _numeric(hint) and not _declared(hint):
                missing.append(f"{where}: {hint}")
        for name, p in params.items():  # an unannotated number is unchecked too
            if name not in _hints(entry.factory) and isinstance(p.default, (int, float)) \
                    and not isinstance(p.default, bool):
                missing.append(f"{entry.kind}/{entry.name}.{name}: no annotation")
    return missing


def test_every_numeric_option_of_every_registered_factory_declares_its_range():
    """The class: a registered factory's numeric option carries a ``Range`` (or is a ``Literal``),
    or is in the commented ``UNBOUNDED`` list; a new option without one fails here."""
    assert not unranged_numeric_options()


def test_the_range_walk_finds_a_new_unranged_option():
    @registry.register("hook", "_test_unranged")
    def _factory(rate: float = 0.1, count: int = 3, ok: registry.PositiveInt = 1, flag: bool = True,
                 raw=2.0):
        return None

    try:
        found = [m.split(":")[0] for m in unranged_numeric_options() if "_test_unranged" in m]
        assert found == ["hook/_test_unranged.rate", "hook/_test_unranged.count", "hook/_test_unranged.raw"]
    finally:
        registry._REGISTRY["hook"].pop("_test_unranged")


@pytest.mark.parametrize("override, key", [
    ("algo=sac env=pendulum loss.tau=0", "loss.tau"),
    ("algo=td3 env=pendulum loss.policy_delay=0", "loss.policy_delay"),
    ("algo=iql env=pendulum loss.expectile=1", "loss.expectile"),
    ("algo=dt env=pendulum model.dropout=1", "model.dropout"),
    ("algo=a2c loss.entropy_coef=-1", "loss.entropy_coef"),
    ("optim.warmup_steps=-1", "optim.warmup_steps"),
    ("algo=impala hooks.vtrace.rho_bar=0", "hooks.vtrace.rho_bar"),
    ("algo=qmix env=vmas/navigation env.discrete_actions=7", "env.discrete_actions"),
])
def test_newly_ranged_options_are_refused_out_of_range(tmp_path, capsys, override, key):
    code, _, err = run_cli([*override.split(), "logger=none"], tmp_path, capsys)
    assert code == 2, err
    assert err.startswith(f"rlrun: error: {key}:") and "Traceback" not in err, err


@pytest.mark.parametrize("override, key", [
    ("seed=1180591620717411303424", "seed"),                  # overflowed numpy's seeding mid-build
    ("seed=-1", "seed"),
    ("total_frames=99999999999999999999999", "total_frames"),  # trained
    ("algo=ppo loss.clip_epsilon=-0.2", "loss.clip_epsilon"),  # trained
    ("algo=ppo loss.entropy_coef=-1", "loss.entropy_coef"),
])
def test_out_of_range_values_are_refused_naming_the_key(tmp_path, capsys, override, key):
    code, _, err = run_cli([*override.split(), "logger=none"], tmp_path, capsys)
    assert code == 2, err
    assert err.startswith(f"rlrun: error: {key}:") and "Traceback" not in err
    assert not list(tmp_path.rglob("checkpoint.pt"))


def test_report_group_by_an_unknown_key_names_the_valid_ones(tmp_path, capsys):
    """``--group-by nonsense`` grouped every run into one '(unset)' cell and exited 0."""
    from mlflow.tracking import MlflowClient

    from rlrun.report.cli import main as report_main

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("rlrun", artifact_location=(tmp_path / "mlruns").as_uri())
    run = client.create_run(exp, tags={"algo": "ppo", "seed": "0"})
    client.log_param(run.info.run_id, "loss.clip_epsilon", "0.2")
    client.log_metric(run.info.run_id, "eval/episode_return", 10.0, step=100)
    client.set_terminated(run.info.run_id)
    capsys.readouterr()
    assert report_main(["--tracking-uri", uri, "--group-by", "nonsense"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlrun: error: --group-by 'nonsense'") and len(err.splitlines()) == 1, err
    assert "algo" in err and "loss.clip_epsilon" in err
    for ok in ("algo", "params.loss.clip_epsilon", "tags.algo,config_hash"):
        assert report_main(["--tracking-uri", uri, "--group-by", ok, "--no-plots"]) == 0, ok


def test_building_a_mujoco_env_prints_nothing_of_gymnasiums(tmp_path):
    """gymnasium's "Box low's precision lowered" warning reached stderr before rlrun's own lines
    (``rlrun algo=td3 env=halfcheetah``); run in a fresh process so that pytest does not catch it."""
    pytest.importorskip("mujoco")
    import subprocess
    import sys

    code = "from rlrun.envs.gym import GymVecEnv; GymVecEnv('HalfCheetah-v5', 1).close()"
    proc = subprocess.run([sys.executable, "-W", "always", "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "precision" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("override, key, named", [
    ("+env.make_kwargs.foo=1", "env.make_kwargs.foo", "sutton_barto_reward"),         # a TypeError in the env
    ("env=pendulum algo=sac +env.make_kwargs.gravity=1", "env.make_kwargs.gravity", "g"),
    ("+env.make_kwargs.max_episode_steps=5", "env.make_kwargs.max_episode_steps", "env.max_episode_steps"),
])
def test_env_constructor_keywords_are_checked_before_anything_is_built(tmp_path, capsys, override, key,
                                                                       named):
    code, _, err = run_cli([*override.split(), "logger=none"], tmp_path, capsys)
    assert code == 2, err
    assert err.startswith(f"rlrun: error: {key}:") and "Traceback" not in err and "TypeError" not in err
    assert named in err.splitlines()[-1]
    assert not list(tmp_path.rglob("checkpoint.pt"))


def test_env_constructor_keywords_it_takes_still_work(tmp_path, capsys):
    code, _, err = run_cli(["env=pendulum", "algo=sac", "+env.make_kwargs.g=9.0", "total_frames=64",
                            "collector.init_random_frames=32", "collector.frames_per_batch=32",
                            "eval.episodes=1", "logger=none", "progress=false"], tmp_path, capsys)
    assert code == 0, err


@pytest.mark.parametrize("override, key", [
    ("env.num_envs=100000000", "env.num_envs"),                         # allocated until killed
    ("algo=mappo env=vmas/navigation env.num_envs=1000000000", "env.num_envs"),
    ("env=pong env.num_envs=1000000", "env.num_envs"),
    ("env=pendulum algo=sac buffer.capacity=100000000000", "buffer.capacity"),
    ("collector.frames_per_batch=100000000000 total_frames=100000000000", "collector.frames_per_batch"),
])
def test_sizes_that_cannot_fit_in_memory_are_refused_with_the_figures(tmp_path, capsys, override, key):
    code, _, err = run_cli([*override.split(), "logger=none", "device=cpu"], tmp_path, capsys)
    assert code == 2, err
    assert err.startswith(f"rlrun: error: {key}: the run would hold at least") and "available" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 2


@pytest.mark.parametrize("override, key, default", [
    ("~optim.lr", "optim.lr", "optim.lr=0.0003"),                     # trained on Adam's own default
    ("algo=sac env=pendulum ~loss.tau", "loss.tau", "loss.tau="),
    ("~model.hidden", "model.hidden", "model.hidden=[64,64]"),
    ("~collector.frames_per_batch", "collector.frames_per_batch", None),  # no default: required
    # conf/config.yaml is these defaults' one home: deleted, they are missing (no copy in the schema)
    ("~trainer.epochs_per_batch", "trainer.epochs_per_batch", "is required but not set"),
    ("~eval.max_envs", "eval.max_envs", "is required but not set"),
])
def test_deleting_a_key_that_falls_back_to_a_default_in_code_is_refused(tmp_path, capsys, override, key,
                                                                        default):
    code, _, err = run_cli([*override.split(), "total_frames=2048", "eval.episodes=1", "logger=none",
                            "progress=false"], tmp_path, capsys)
    assert code == 2, err
    assert err.startswith(f"rlrun: error: {key}:") and "Traceback" not in err, err
    if default:
        assert default in err
    assert not list(tmp_path.rglob("checkpoint.pt"))


def test_a_vmas_scenario_option_the_scenario_does_not_use_is_refused(tmp_path, capsys):
    """VMAS scenarios take **kwargs and only warned about an unused one (a typo ran the default)."""
    pytest.importorskip("vmas")
    code, _, err = run_cli(["algo=mappo", "env=vmas/navigation", "+env.scenario_kwargs.foo=1", "logger=none"],
                           tmp_path, capsys)
    assert code == 2, err
    assert err.startswith("rlrun: error: env.scenario_kwargs.foo:") and "Traceback" not in err, err
    assert not list(tmp_path.rglob("checkpoint.pt"))


@pytest.mark.parametrize("override", ["total_frames=-1", "hydra.run.dir=out/a/b total_frames=-1"])
def test_a_command_refused_while_composing_leaves_no_directory_behind(tmp_path, capsys, override):
    """The writable-directory probe makes ``runs/`` (or the given run dir) as Hydra would, and
    removes what it made: a refused command leaves the directory as it found it."""
    code, _, err = run_cli(["algo=sac", "env=pendulum", *override.split()], tmp_path, capsys)
    assert code == 2 and "total_frames" in err, err
    assert list(tmp_path.iterdir()) == []
