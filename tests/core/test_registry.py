"""The component registry: lookups, option and type checks, _target_, entry points, listings."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rlrun.core import registry
from rlrun.core.errors import ConfigError
from rlrun.core.registry import build, check_kwargs, entries, lookup, register
from rlrun.trainer.hooks import GAE, TargetUpdate

TARGETS = type("LossWithTargets", (), {"has_targets": True})()


@pytest.fixture
def isolated_registry(monkeypatch):
    """Registrations made by the test are undone afterwards."""
    entries()  # load the built-ins first
    for kind in registry.KINDS:
        monkeypatch.setitem(registry._REGISTRY, kind, dict(registry._REGISTRY[kind]))
    return registry._REGISTRY


def test_unknown_name_lists_known_names_and_suggests_the_closest():
    with pytest.raises(ConfigError) as info:
        lookup("loss", "ppoo")
    err = info.value
    assert err.key == "loss.name"
    assert "unknown loss 'ppoo'" in err.message and "Did you mean 'ppo'?" in err.message
    known = ", ".join(sorted(e.name for e in entries("loss")))
    assert "ppo" in known and "sac" in known
    assert f"use one of: {known}" in err.fix and "rlrun list loss" in err.fix


def test_unknown_name_without_close_match_has_no_suggestion_and_uses_the_given_key():
    with pytest.raises(ConfigError) as info:
        build("hook", {"name": "zzzzzz"}, key="hooks.mine")
    assert info.value.key == "hooks.mine.name"
    assert "Did you mean" not in info.value.message
    assert "gae" in info.value.fix and "target_update" in info.value.fix


def test_missing_name_raises_config_error():
    with pytest.raises(ConfigError) as info:
        build("hook", {"gamma": 0.9}, key="hooks.gae")
    assert info.value.key == "hooks.gae.name"


def test_unknown_option_names_key_dot_option():
    with pytest.raises(ConfigError) as info:
        build("hook", {"name": "gae", "gama": 0.9}, key="hooks.gae")
    assert info.value.key == "hooks.gae.gama"
    assert "Did you mean 'gamma'?" in info.value.message
    assert "lmbda" in info.value.fix


def test_type_error_names_the_key():
    with pytest.raises(ConfigError) as info:
        build("hook", {"name": "gae", "gamma": "abc"}, key="hooks.gae")
    assert info.value.key == "hooks.gae.gamma"
    assert "expected float, got 'abc'" in info.value.message
    with pytest.raises(ConfigError) as info:
        build("hook", {"name": "target_update", "interval_updates": 1.5}, loss=TARGETS)
    assert info.value.key == "hook.interval_updates"
    with pytest.raises(ConfigError):
        # a bool is not an int
        build("hook", {"name": "target_update", "interval_updates": True}, loss=TARGETS)


def test_numbers_written_as_strings_are_accepted():
    hook = build("hook", {"name": "gae", "gamma": "3e-4", "lmbda": 1})
    assert isinstance(hook, GAE)
    assert hook.gamma == pytest.approx(3e-4) and isinstance(hook.gamma, float)
    assert hook.lmbda == 1.0 and isinstance(hook.lmbda, float)
    every = build("hook", {"name": "target_update", "interval_updates": "1e1"}, loss=TARGETS).interval
    assert every == 10 and isinstance(every, int)


def test_lists_and_optionals_are_checked():
    def factory(hidden: list[int] = (64,), limit: int | None = None):
        return hidden, limit

    assert check_kwargs(factory, {"hidden": ["8", 16], "limit": None}, "model") == {"hidden": [8, 16],
                                                                                     "limit": None}
    with pytest.raises(ConfigError) as info:
        check_kwargs(factory, {"hidden": 64}, "model")
    assert info.value.key == "model.hidden"
    with pytest.raises(ConfigError) as info:
        check_kwargs(factory, {"limit": "x"}, "model")
    assert info.value.key == "model.limit"


def test_build_accepts_dictconfig_and_passes_only_accepted_extras():
    hook = build("hook", OmegaConf.create({"name": "target_update", "interval_updates": 3}), spec="ignored",
                 loss=TARGETS)
    assert isinstance(hook, TargetUpdate) and hook.interval == 3


def test_target_escape_hatch_builds_an_importable_callable():
    hook = build("hook", {"_target_": "rlrun.trainer.hooks.make_target_update", "name": "x",
                          "interval_updates": "4"}, loss=TARGETS, key="hooks.custom")
    assert isinstance(hook, TargetUpdate) and hook.interval == 4
    hook = build("hook", {"_target_": "rlrun.trainer.hooks.TargetUpdate", "interval_updates": 5})  # a class
    assert isinstance(hook, TargetUpdate) and hook.interval == 5
    with pytest.raises(ConfigError) as info:
        build("hook", {"_target_": "rlrun.trainer.hooks.NoSuchHook"}, key="hooks.custom")
    assert info.value.key == "hooks.custom._target_"
    with pytest.raises(ConfigError) as info:
        build("hook", {"_target_": "no_such_module_xyz.thing"}, key="hooks.custom")
    assert info.value.key == "hooks.custom._target_"
    with pytest.raises(ConfigError) as info:
        build("hook", {"_target_": "rlrun.trainer.hooks.TargetUpdate", "evry": 2}, key="hooks.custom")
    assert info.value.key == "hooks.custom.evry"


def test_target_class_options_are_type_checked_like_functions():
    hook = build("hook", {"_target_": "rlrun.trainer.hooks.TargetUpdate", "interval_updates": "4"})
    assert hook.interval == 4 and isinstance(hook.interval, int)
    with pytest.raises(ConfigError) as info:
        build("hook", {"_target_": "rlrun.trainer.hooks.GAE", "gamma": "abc"}, key="hooks.custom")
    assert info.value.key == "hooks.custom.gamma"


class FakeEntryPoint:
    name = "myplugin"

    def __init__(self, loads: list):
        self.loads = loads

    def load(self):
        self.loads.append(self.name)

        @register("hook", "from_plugin")
        def from_plugin(level: int = 1):
            """A hook registered by a third-party package."""
            return ("plugin", level)

        return from_plugin


def test_entry_points_in_rlrun_components_are_loaded_once(monkeypatch, isolated_registry):
    loads: list = []
    groups: list = []

    def fake_entry_points(group=None):
        groups.append(group)
        return [FakeEntryPoint(loads)]

    monkeypatch.setattr(registry, "entry_points", fake_entry_points)
    monkeypatch.setattr(registry, "_loaded", False)
    assert build("hook", {"name": "from_plugin", "level": 3}) == ("plugin", 3)
    assert groups == ["rlrun.components"] and loads == ["myplugin"]
    assert "from_plugin" in [e.name for e in entries("hook")]
    assert loads == ["myplugin"]  # not loaded again


def test_entries_list_kinds_with_one_line_summaries(isolated_registry):
    @register("hook", "documented")
    def documented():
        """First line of the docs.

        More details that must not show.
        """

    @register("hook", "undocumented")
    def undocumented():
        pass

    by_name = {e.name: e for e in entries("hook")}
    assert by_name["documented"].summary == "First line of the docs."
    assert by_name["undocumented"].summary == ""
    assert [e.name for e in entries("hook")] == sorted(by_name)
    everything = entries()
    kinds = [e.kind for e in everything]
    assert kinds == sorted(kinds, key=registry.KINDS.index)
    assert {"env", "model", "collector", "loss", "optim", "hook", "logger"} <= set(kinds)
    loss = {e.name: e.summary for e in entries("loss")}
    assert {"ppo", "sac"} <= set(loss)
    assert loss["sac"] == "SAC: twin-Q TD loss, reparameterised actor loss, learned temperature."
    assert all(e.summary and "\n" not in e.summary for e in everything
               if e.name not in ("undocumented",))


def test_register_rejects_unknown_kind():
    with pytest.raises(ValueError, match="unknown component kind"):
        register("widget", "x")


def test_the_static_index_rlrun_list_reads_matches_the_registry():
    import json
    from importlib.resources import files

    from rlrun.core.component_index import INDEX, live

    stored = [tuple(row) for row in json.loads(files("rlrun.core").joinpath(INDEX).read_text())]
    assert stored == live(builtin_only=True), "stale index: run python -m rlrun.core.component_index"


def test_what_a_component_declares_is_kept_on_its_entry_not_on_the_function():
    """``register(check=, options=, layouts=)`` (or a class's own ``check_options``/``agent_layouts``)
    lands on the ``Entry``; no registered function carries a side-channel attribute."""
    assert lookup("env", "vmas").agent_layouts == ("group",)
    assert lookup("env", "gym").agent_layouts == ("single",)
    assert lookup("model", "group_qnet").agent_layouts == ("group",)
    assert lookup("loss", "ppo").agent_layouts == ("single", "group")
    assert lookup("collector", "multi_sync").check_options is not None
    assert lookup("hook", "gae").check_options is not None and lookup("env", "gym").config_check is not None
    for e in entries():
        if not isinstance(e.factory, type):
            assert not {"config_check", "check_options", "agent_layouts"} & set(vars(e.factory)), e.name


def test_a_factorys_check_options_runs_before_it_is_built(isolated_registry):
    """Rules between options that a signature cannot state (``factory.check_options(node, key)``) are
    checked by the registry itself, for any factory that declares them, before the factory is called."""
    built: list = []

    def check(node: dict, key: str) -> None:
        if node.get("low", 0) >= node.get("high", 1):
            raise ConfigError("low must be below high", key=f"{key}.low", fix="set low < high")

    @register("hook", "ordered", options=check)
    def ordered(low: int = 0, high: int = 1):
        """A hook whose options must be ordered."""
        built.append((low, high))
        return (low, high)
    with pytest.raises(ConfigError) as err:
        build("hook", {"name": "ordered", "low": 5, "high": 2}, key="hooks.o")
    assert err.value.key == "hooks.o.low" and built == []
    assert build("hook", {"name": "ordered", "low": 1, "high": 2}, key="hooks.o") == (1, 2)


@pytest.mark.parametrize("hint, words", [
    (registry.PositiveInt, "a positive integer"),
    (registry.NonNegativeInt, "a non-negative integer"),
    (registry.PositiveFloat, "a number > 0"),
    (registry.Fraction, "a number >= 0 and <= 1"),
    (registry.Annotated[int, registry.Range(ge=1, lt=10)], "an integer >= 1 and < 10"),
    (registry.Annotated[float, registry.Range(gt=0.5)], "a number > 0.5"),
    (registry.Literal["auto", 3], "one of auto, 3"),
    (int | None, "an integer or null"),
    (bool | registry.Literal["auto"], "true, false or auto"),
])
def test_an_annotation_is_described_in_the_words_of_the_error_message(hint, words):
    """The words every range error uses (``must be <words>, got ...``), pinned per kind of annotation."""
    assert registry.describe(hint) == words
    with pytest.raises(ConfigError) as refused:
        registry.check_value("x" if hint is not registry.Literal["auto", 3] else 4, hint, "k")
    assert refused.value.key == "k" and refused.value.message.startswith(f"must be {words}, got ")
