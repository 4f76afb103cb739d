"""Config keys reach their components: a non-default value from the command line arrives in the
built object, and a run behaves by it (issue 45).

The loop's own arguments are tested elsewhere (tests/trainer); what is tested here is the path from
a config key to them, through ``rlrun.lifecycle.build`` and ``rlrun.lifecycle.run``. The tables
are checked against the schemas: a key added to ``TrainerSection``/``EvalSection``/
``CheckpointSection`` or to the sync collector's or replay buffer's factory without a row here
fails ``test_every_schema_key_has_a_row``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_utils import run_cli, summary_of

from rlrun.core import config_schema, registry

BASE = ["algo=dqn", "env=cartpole", "total_frames=1200", "collector.frames_per_batch=100",
        "collector.init_random_frames=0",
        "logger=none", "progress=false", "device=cpu"]


class _Captured(Exception):
    """Raised by the fake Trainer: everything the run wires has been built."""


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from rlrun.lifecycle.compose import CONF_DIR, register_resolvers

    register_resolvers()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        with open_dict(cfg):
            del cfg["hydra"]
    return cfg


def wired(overrides: list[str], tmp_path: Path, monkeypatch, until: str = "trainer") -> dict[str, Any]:
    """Composes ``BASE + overrides`` and runs ``rlrun.lifecycle.run.train`` up to the Trainer: the
    Trainer's arguments, and the kwargs each component factory got from the builder.

    ``until="logger"``: on past the Trainer (a stand-in) to the tracker, which the run opens after
    it; the built logger is ``got["logger"]`` (finished again before this returns)."""
    import rlrun.lifecycle.build as build_mod
    import rlrun.lifecycle.run as run_mod

    got: dict[str, Any] = {"factory": {}}
    real_resolve = registry.resolve_factory

    def spying(kind: str, node: dict, key: str):
        factory, rest = real_resolve(kind, node, key)

        @functools.wraps(factory)
        def recorded(*args, **kwargs):
            got["factory"][key] = kwargs
            return factory(*args, **kwargs)
        return recorded, rest

    class FakeTrainer:
        interrupted, logger = False, None

        def __init__(self, collector, loss, optimizer, hooks, epochs_per_batch, optim_steps_per_epoch,
                     learning_starts, buffer, **kwargs):
            self.hooks = hooks
            got.update(collector=collector, hooks=hooks, epochs_per_batch=epochs_per_batch,
                       optim_steps_per_epoch=optim_steps_per_epoch, learning_starts=learning_starts,
                       buffer=buffer, **kwargs)
            if until == "trainer":
                raise _Captured

        def request_stop(self, reason: str) -> None: ...

    def logged(cfg, run_dir, run, *args):  # the tracker is open: nothing is trained
        got["logger"] = run.logger.opened
        raise _Captured

    def ended(cfg, run_dir, run, status):  # closes what the tracker opened
        if getattr(run.logger, "opened", None) is not None:
            run.logger.opened.finish("FAILED")
        return {}

    monkeypatch.setattr(registry, "resolve_factory", spying)
    monkeypatch.setattr(build_mod, "Trainer", FakeTrainer)
    monkeypatch.setattr(run_mod, "_train_logged", logged)
    monkeypatch.setattr(run_mod, "_summarise", ended)
    tmp_path.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(tmp_path)
    cfg = _compose([*BASE, *overrides])
    with pytest.raises(_Captured):
        run_mod.train(cfg, tmp_path / "run")
    torch.set_num_threads(1)
    return got


def _hook(name: str, attr: str) -> Callable[[dict], Any]:
    return lambda got: getattr(got["hooks"][name], attr)


# config key -> (override, what the built run holds, expected). Each value differs from the preset's.
SECTION_ROWS: dict[str, tuple[list[str], Callable[[dict], Any], Any]] = {
    "trainer.learning_starts": (["collector.init_random_frames=0", "trainer.learning_starts=700"],
                                lambda g: g["learning_starts"], 700),
    "trainer.epochs_per_batch": (["trainer.epochs_per_batch=3"], lambda g: g["epochs_per_batch"], 3),
    "trainer.optim_steps_per_epoch": (["trainer.optim_steps_per_epoch=7"],
                                      lambda g: g["optim_steps_per_epoch"], 7),
    "trainer.updates_per_frame": (["trainer.updates_per_frame=0.25"],
                                  lambda g: g["optim_steps_per_epoch"], 25),
    "checkpoint.keep_best": (["checkpoint.keep_best=true"], lambda g: "keep_best" in g["hooks"], True),
    "eval.interval_frames": (["eval.interval_frames=300"], _hook("evaluation", "interval"), 300),
    "eval.episodes": (["eval.episodes=3"], lambda g: g["hooks"]["evaluation"].evaluator.episodes, 3),
    "eval.max_envs": (["eval.episodes=6", "eval.max_envs=2"],
                      lambda g: g["hooks"]["evaluation"].evaluator.env.num_envs, 2),
    "eval.target_return": (["eval.target_return=123.5"], _hook("evaluation", "target"), 123.5),
    "eval.video": (["eval.video=true"], lambda g: "eval_video" in g["hooks"], True),
    "eval.video_every": (["eval.video=true", "eval.video_every=4"], _hook("eval_video", "every_nth"), 4),
    "checkpoint.interval_frames": (["checkpoint.interval_frames=400"], _hook("checkpoint", "interval"), 400),
}
# keys an online run does not read: checked on a run whose budget counts updates, or by a run below
OTHER_ROWS = {"eval.interval_updates", "checkpoint.interval_updates", "checkpoint.buffer",
              "checkpoint.max_buffer_mb",
              "checkpoint.keep_last"}  # read by CheckpointWriter.rotate: tests/lifecycle/test_keep_best.py

# component keys: the sync collector's and the replay buffer's options, as the builder passes them on
COMPONENT_ROWS: dict[str, tuple[str, Any]] = {
    "collector.frames_per_batch": ("collector.frames_per_batch=200", 200),
    "collector.init_random_frames": ("collector.init_random_frames=300", 300),
    "collector.explore": ("collector.explore=false", False),
    "buffer.capacity": ("buffer.capacity=5000", 5000),
    "buffer.batch_size": ("buffer.batch_size=17", 17),
    "buffer.sampler": ("buffer.sampler=prioritized", "prioritized"),
    "buffer.storage": ("buffer.storage=memmap", "memmap"),
    "buffer.scratch_dir": ("+buffer.scratch_dir=scratch", "scratch"),
    "buffer.alpha": ("buffer.alpha=0.3", 0.3),
    "buffer.beta": ("buffer.beta=0.7", 0.7),
}
# factory parameters rlrun supplies itself (not config keys: the registry refuses them in a node)
SUPPLIED = {"env", "policy", "total_frames", "seed", "device", "run_dir", "data", "buffer", "env_config"}

# logger options, per registered logger: (overrides, {option: (what the built logger holds, expected)}).
# One build per logger checks all its options (W&B and MLflow take seconds to open a run); "{tmp}" is
# the test's directory. Every value differs from the factory's default (checked below).
LOGGER_ROWS: dict[str, tuple[list[str], dict[str, tuple[Callable[[Any, str], Any], Any]]]] = {
    "tensorboard": (["logger=tensorboard", "logger.subdir=tb_wired", "logger.flush_secs=3"], {
        "subdir": (lambda lg, tmp: Path(lg.writer.log_dir).name, "tb_wired"),
        "flush_secs": (lambda lg, tmp: lg.writer.flush_secs, 3),
    }),
    "mlflow": (["logger=mlflow", "logger.tracking_uri=sqlite:///{tmp}/wired.db", "logger.root={tmp}/store",
                "logger.experiment=wired"], {
        "tracking_uri": (lambda lg, tmp: lg.inner.tracking_uri, "sqlite:///{tmp}/wired.db"),
        "experiment": (lambda lg, tmp: lg.inner.client.get_experiment(lg.inner.experiment_id).name, "wired"),
        # with an SQLite tracking_uri, root is where the artifacts go
        "root": (lambda lg, tmp: lg.inner.client.get_experiment(lg.inner.experiment_id).artifact_location,
                 "file://{tmp}/store/mlruns"),
    }),
    "wandb": (["logger=wandb", "logger.mode=offline", "logger.project=p_wired", "logger.entity=e_wired",
               "logger.group=g_wired", "logger.dir={tmp}/wb"], {
        "mode": (lambda lg, tmp: lg.inner.run.settings.mode, "offline"),
        "project": (lambda lg, tmp: lg.inner.run.project, "p_wired"),
        "entity": (lambda lg, tmp: lg.inner.run.entity, "e_wired"),
        "group": (lambda lg, tmp: lg.inner.run.group, "g_wired"),
        "dir": (lambda lg, tmp: lg.inner.run.dir.startswith(f"{tmp}/wb/"), True),
    }),
    "multi": (["logger=multi", "~logger.loggers.mlflow", "+logger.loggers.csv={name:csv}"], {
        "loggers": (lambda lg, tmp: [type(m).__name__ for m in lg.loggers],
                    ["TensorBoardLogger", "CSVLogger"]),
    }),
}
# logger factory parameters rlrun supplies itself (the run's directory, name, tracker run and tags)
LOGGER_SUPPLIED = {"run_dir", "run_name", "run_id", "tags", "resumed", "resume_step"}


def _section_keys() -> set[str]:
    sections = {"trainer": config_schema.TrainerSection, "eval": config_schema.EvalSection,
                "checkpoint": config_schema.CheckpointSection}
    return {f"{name}.{f.name}" for name, cls in sections.items() for f in dataclasses.fields(cls)}


def _component_keys() -> set[str]:
    keys = set()
    for section, kind, name in (("collector", "collector", "sync"), ("buffer", "buffer", "replay")):
        params = inspect.signature(registry.lookup(kind, name).factory).parameters
        keys |= {f"{section}.{p}" for p in params if p not in SUPPLIED}
    return keys


def _logger_options() -> dict[str, dict[str, inspect.Parameter]]:
    out = {}
    for entry in registry.entries("logger"):
        params = inspect.signature(registry.lookup("logger", entry.name).factory).parameters
        out[entry.name] = {name: p for name, p in params.items() if name not in LOGGER_SUPPLIED}
    return out


def test_every_schema_key_has_a_row():
    assert _section_keys() == set(SECTION_ROWS) | OTHER_ROWS
    assert _component_keys() == set(COMPONENT_ROWS)
    options = _logger_options()
    assert {f"logger.{name}.{o}" for name, opts in options.items() for o in opts} == {
        f"logger.{name}.{o}" for name, (_, reads) in LOGGER_ROWS.items() for o in reads}
    for name, (_, reads) in LOGGER_ROWS.items():  # a row's value must differ from the default
        for option, (_, expected) in reads.items():
            assert options[name][option].default != expected, f"logger.{option}: pick a non-default value"


@pytest.mark.parametrize("key", sorted(SECTION_ROWS))
def test_section_key_reaches_the_run(key, tmp_path, monkeypatch):
    overrides, read, expected = SECTION_ROWS[key]
    # the row's overrides but its last (the key itself): the preset's value, in the same setting
    default = read(wired(overrides[:-1], tmp_path / "default", monkeypatch))
    assert default != expected, f"{key}: pick a row value that differs from the preset's"
    assert read(wired(overrides, tmp_path / "set", monkeypatch)) == expected


@pytest.mark.parametrize("key", sorted(COMPONENT_ROWS))
def test_component_key_reaches_its_factory(key, tmp_path, monkeypatch):
    override, expected = COMPONENT_ROWS[key]
    section, _, option = key.partition(".")
    got = wired([override], tmp_path, monkeypatch)
    assert got["factory"][section][option] == expected


@pytest.mark.parametrize("name", sorted(LOGGER_ROWS))
def test_logger_keys_reach_the_built_logger(name, tmp_path, monkeypatch):
    """Each ``logger.<option>`` from the command line is what the run's tracker was opened with (read
    back from the built logger, not only from the factory's arguments)."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_DIR", raising=False)
    tmp = str(tmp_path.resolve())
    overrides, reads = LOGGER_ROWS[name]
    got = wired([o.replace("{tmp}", tmp) for o in overrides], tmp_path, monkeypatch, until="logger")
    for option, (read, expected) in reads.items():
        want = expected.replace("{tmp}", tmp) if isinstance(expected, str) else expected
        held = read(got["logger"], tmp)
        assert held == want, f"logger.{option}: the {name} logger holds {held!r}, not {want!r}"


def test_update_intervals_reach_their_hooks(tmp_path, monkeypatch):
    """An offline run's intervals (eval, checkpoint): the run's budget counts updates (a stand-in for the
    dataset run, whose build needs a dataset on disk), so the checkpoint hook counts them too."""
    import rlrun.lifecycle.build as build_mod
    from rlrun.trainer.loop import Budget

    real = build_mod._check_source
    monkeypatch.setattr(build_mod, "_check_source", lambda cfg, loss, offline: (
        real(cfg, loss, offline), Budget("updates", 5000))[1])
    monkeypatch.setattr(build_mod, "_optim_steps", lambda *a: 10)
    from rlrun.collectors.sync import SyncCollector

    monkeypatch.setattr(SyncCollector, "budget_unit", "updates")
    got = wired(["checkpoint.interval_updates=300", "eval.interval_updates=200"], tmp_path, monkeypatch)
    assert got["hooks"]["checkpoint"].interval == 300 and got["hooks"]["evaluation"].interval == 200


def test_learning_starts_holds_back_the_first_update(tmp_path, capsys):
    """The run behaves by trainer.learning_starts, not collector.init_random_frames: from frame 1000,
    batches 10, 11, 12 of 100 frames each give ceil(100 * 0.25) = 25 updates."""
    args = [*BASE, "collector.init_random_frames=0", "trainer.learning_starts=1000", "eval.episodes=2",
            "trainer.updates_per_frame=0.25",
            "eval.interval_frames=0", "checkpoint.interval_frames=0", "hydra.run.dir=r"]
    code, _, err = run_cli(args, tmp_path, capsys)
    assert code == 0, err
    assert summary_of(tmp_path / "r")["optim_steps"] == 75


@pytest.mark.parametrize(("args", "kept"), [(["checkpoint.buffer=false"], False),
                                            (["checkpoint.max_buffer_mb=0"], False),
                                            ([], True)])
def test_checkpoint_buffer_keys_decide_what_is_saved(args, kept, tmp_path, capsys):
    base = [*BASE, "total_frames=300", "eval.episodes=2", "eval.interval_frames=0",
            "checkpoint.interval_frames=0", "hydra.run.dir=r"]
    code, _, err = run_cli([*base, *args], tmp_path, capsys)
    assert code == 0, err
    state = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=True)
    assert (state.get("buffer") is not None) == kept


@pytest.mark.parametrize("init", [0, 300])
def test_learning_starts_falls_back_to_init_random_frames(init, tmp_path, monkeypatch):
    """``trainer.learning_starts: null`` means ``collector.init_random_frames``, 0 included."""
    got = wired([f"collector.init_random_frames={init}"], tmp_path, monkeypatch)
    assert got["learning_starts"] == init


@pytest.mark.skipif(torch.cuda.is_available(), reason="asks for CUDA where there is none")
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_device_cuda_without_cuda_names_the_key(device):
    """``device=cuda`` on a machine without CUDA: one line naming ``device`` and the fix, before
    anything is built (not torch's error at the first tensor moved)."""
    from rlrun.core.errors import ConfigError
    from rlrun.lifecycle.build import resolve_device

    with pytest.raises(ConfigError) as err:
        resolve_device(device)
    assert (err.value.key, err.value.message, err.value.fix) == (
        "device", "CUDA is not available here", "use device=cpu or auto")
    assert resolve_device("cpu") == torch.device("cpu")
