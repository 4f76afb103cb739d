"""The contracts hold: components meet their Protocols, and nothing reaches into another's insides."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

import rlrun
from rlrun.core.contracts import Buffer, Logger, Loss, Source
from rlrun.core.registry import build, entries

PACKAGE = Path(rlrun.__file__).parent


# ``obj._name`` on anything but self/cls, allowed where the object is not rlrun's: each entry is
# (module, the expression as ast.unparse writes it) and why it has no public alternative.
_JOINT_ADAM = "Adam's foreach step over several groups at once (torch's multi-tensor ops: no public name)"
# run_layers calls an MLP's layers' forward directly only where nn.Module.__call__ would (no hook
# registered): the same test __call__ makes, on the same (private) hook dicts
_MODULE_HOOKS = "nn.Module.__call__'s own no-hook test, before calling layers' forward directly"
_STEP_HOOKS = "torch's step hooks: if any, torch's step runs"
ALLOWED_PRIVATE = {
    ("core/private/torch.py", "fn._dynamo_marked_constant"): "torch.compile's marker attribute on a function",
    ("core/private/torch.py", "cpp_builder._get_optimization_cflags"):
        "inductor's gcc flags, to drop the one that slows its mask kernels 10x (no option for it)",
    ("benchmarks/offline_update.py", "torch._foreach_lerp_"): "torch's fused lerp (no public name)",
    ("benchmarks/update.py", "torch._foreach_lerp_"): "torch's fused lerp (no public name)",
    ("benchmarks/update.py", "torch._fused_adam_"): "the eager ceiling's one fused Adam kernel call, without "
                                                      "torch.optim's Python around it (no public name)",
    ("modules/networks.py", "torch._foreach_lerp_"): "torch's fused lerp (no public name)",
    ("core/private/torch.py", "torch.ops.mkldnn._linear_pointwise"):
        "torch's oneDNN linear on plain tensors (no public name; MKL's GEMM takes 2x as long on AMD)",
    ("trainer/optim.py", "torch._foreach_add_"): _JOINT_ADAM,
    ("trainer/optim.py", "torch._foreach_lerp_"): _JOINT_ADAM,
    ("trainer/optim.py", "torch._foreach_mul_"): _JOINT_ADAM,
    ("trainer/optim.py", "torch._foreach_addcmul_"): _JOINT_ADAM,
    ("trainer/optim.py", "torch._foreach_sqrt"): _JOINT_ADAM,
    ("trainer/optim.py", "torch._foreach_div_"): _JOINT_ADAM,
    ("trainer/optim.py", "torch._foreach_addcdiv_"): _JOINT_ADAM,
    ("trainer/optim.py", "torch._fused_adam_"): "the kernel of Adam(fused=True), once for several groups",
    ("trainer/optim.py", "torch._foreach_norm"): "clip_grad_norm_'s per-tensor norms in one call (FlatAdam)",
    ("trainer/optim.py", "torch._foreach_copy_"): "FlatAdam: parameters back from its flat buffer at once",
    **{("modules/networks.py", f"{obj}.{hooks}"): _MODULE_HOOKS
       for obj, kinds in (("torch_module", ("_global_forward_hooks", "_global_forward_pre_hooks",
                                            "_global_backward_hooks", "_global_backward_pre_hooks")),
                          ("m", ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                 "_backward_pre_hooks")))
       for hooks in kinds},
    ("loggers/remote_worker.py", "os._exit"): "public: the worker ends without the teardown",
    ("cli/beside.py", "os._exit"): "public: the composing child ends without the parent's atexit "
                                   "handlers; the parent ends mid-import with the child's exit code",
    ("modules/cnn.py", "obs._version"): "a tensor's in-place version counter (torch has no public one)",
    ("modules/cnn.py", "p._version"): "a tensor's in-place version counter (torch has no public one)",
    ("launch/local.py", "super()._executor"): "the method it overrides (its own class hierarchy)",
    ("launch/signals.py", "JobEnvironment._usr_sig"): "submitit's signal handler, which it replaces",
    ("launch/submitit_launch.py", "ret._return_value"): "Hydra's JobReturn stores the value there",
    ("launch/sweeper.py", "ret._return_value"): "Hydra's JobReturn stores the value there",
    ("loggers/store.py", "SqlAlchemyStore._engine_map"): "MLflow's engine cache, reset for a fresh store",
    ("core/private/torch.py", "fn.__dynamo_disable"):
        "torch's cache of its Dynamo wrapper, pre-filled so that optimisers do not import torch._dynamo",
    ("core/private/torch.py", "torch._compile"): "torch's own module, checked for whether Dynamo is loaded",
    ("core/private/torch.py", "opt._optimizer_step_pre_hooks"): _STEP_HOOKS,
    ("core/private/torch.py", "opt._optimizer_step_post_hooks"): _STEP_HOOKS,
    ("core/private/torch.py", "module._global_optimizer_pre_hooks"): "torch's global step hooks",
    ("core/private/torch.py", "module._global_optimizer_post_hooks"): "torch's global step hooks",
    ("core/private/torch.py", "opt._optimizer_step_code"): "the profiler marker torch's step wrapper calls",
    ("benchmarks/device.py", "torch._dynamo"): "torch's compiler module (its config and reset)",
    ("trainer/compiled.py", "torch._dynamo"): "torch's compiler module (its config and reset)",
    ("collectors/workers/loop.py", "os._exit"): "a worker exits without running the parent's atexit handlers",
}


def private_reaches(path: Path) -> list[tuple[int, str]]:
    """``obj._name`` in one module where ``obj`` is not ``self`` or ``cls`` (dunders aside)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__") and node.attr.endswith("__"):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_module_reaches_into_another_objects_private_members():
    """A component is used through its public members: ``obj._x`` is allowed on ``self`` and
    ``cls`` only, and (narrowly, ``ALLOWED_PRIVATE``) on other libraries' objects."""
    offenders, used = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for line, expr in private_reaches(path):
            if (module, expr) in ALLOWED_PRIVATE:
                used.add((module, expr))
            else:
                offenders.append(f"{module}:{line}: {expr}")
    assert not offenders, "reaches into private members:\n" + "\n".join(offenders)
    assert not set(ALLOWED_PRIVATE) - used, f"stale allow-list entries: {set(ALLOWED_PRIVATE) - used}"


def test_the_private_reach_check_sees_one(tmp_path):
    """The check flags another object's private member, and not the object's own."""
    module = tmp_path / "m.py"
    module.write_text("class A:\n    def f(self, b):\n        self._x = b._y\n        return cls._z\n")
    assert private_reaches(module) == [(3, "b._y")]


def test_no_module_reaches_into_other_components():
    """Hooks and the lifecycle use the trainer's public members and the policy, never a path
    through the loss (``loss.models``) or the logger (``logger.client``)."""
    pattern = re.compile(r"\.models\.|logger\.client|\bloss\.policy\b")
    offenders = [f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
                 for path in PACKAGE.rglob("*.py")
                 for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert not offenders, "\n".join(offenders)


def test_every_registered_loss_declares_its_capabilities():
    for entry in entries("loss"):
        cls = entry.factory
        assert isinstance(cls, type) and issubclass(cls, Loss), entry.name
        assert set(cls.action_spaces) <= {"discrete", "continuous"} and cls.action_spaces, entry.name
        assert set(cls.agent_layouts) <= {"single", "group"} and cls.agent_layouts, entry.name
        # entries by name: the loss's key map places them (under the group key for an agent group)
        assert {"observation", "action"} <= set(cls.reads), entry.name


def test_built_components_meet_their_protocols(tmp_path, make_counter_env):
    from rlrun.collectors.sync import SyncCollector

    env = make_counter_env(2)
    collector = SyncCollector(env, lambda o: {"action": torch.zeros(2, dtype=torch.long)}, 4, 8)
    buffer = build("buffer", {"name": "replay", "capacity": 8, "batch_size": 2})
    logger = build("logger", {"name": "csv"}, run_dir=tmp_path)
    assert isinstance(collector, Source) and isinstance(buffer, Buffer) and isinstance(logger, Logger)
    logger.finish()


@pytest.mark.parametrize("name", ["ppo", "a2c", "sac", "td3", "ddpg", "dqn"])
def test_loss_and_evaluation_share_one_policy_object(name, tmp_path):
    from rlrun.lifecycle.build import build_parts
    from rlrun.lifecycle.explain import compose_config

    env = "cartpole" if name in ("ppo", "a2c", "dqn") else "pendulum"
    cfg = compose_config([f"algo={name}", f"env={env}", "eval.episodes=1", "buffer.capacity=null"
                          if name in ("ppo", "a2c") else "buffer.capacity=1000"])
    run = build_parts(cfg, tmp_path, torch.device("cpu"))
    try:
        assert run.loss.policy is run.policy
        assert all(p is q for p, q in zip(run.loss.policy.parameters(), run.policy.parameters()))
    finally:
        run.close()


def test_key_map_places_per_agent_entries_under_the_group_and_shared_ones_at_the_root():
    from rlrun.core.contracts import KeyMap
    from rlrun.core.specs import GROUP

    group, single = KeyMap(GROUP), KeyMap()
    assert group("observation") == (GROUP, "observation")
    assert group("next.reward") == ("next", GROUP, "reward")
    assert group("next.terminated") == ("next", "terminated")  # the group ends its episode together
    assert group("state") == "state" and group("collector.traj_ids") == ("collector", "traj_ids")
    assert single("next.reward") == ("next", "reward") and single("advantage") == "advantage"
    group.set(advantage=(GROUP, "team_advantage"))
    assert group("advantage") == (GROUP, "team_advantage")
    assert group.names(("advantage", "next.done")) == ("agents.team_advantage", "next.done")

def test_a_plugin_missing_a_protocol_member_fails_when_built_with_the_member_named(monkeypatch):
    """A third-party collector without ``sampled_buffer``/``budget_unit`` is refused by the registry's
    build (one ConfigError naming the component, the members and the protocol), not mid-run."""
    from rlrun.core import registry
    from rlrun.core.contracts import FrameSource
    from rlrun.core.errors import ConfigError
    from rlrun.core.registry import register

    entries()  # rlrun's own components first; the test's go into a copy, dropped afterwards
    monkeypatch.setattr(registry, "_REGISTRY", {k: dict(v) for k, v in registry._REGISTRY.items()})

    class Partial:  # a collector written against the old protocol
        frames, total_frames, policy_version, provided_keys, updates_per_round = 0, 8, 0, frozenset(), None

        def __iter__(self):
            return iter(())

        def update_policy_weights(self, state_dict=None): ...

        def pop_episode_stats(self):
            return [], []

        def state_dict(self):
            return {}

        def load_state_dict(self, state): ...

        def shutdown(self): ...

    class Complete(FrameSource, Partial):
        pass

    register("collector", "test_partial")(lambda: Partial())
    register("collector", "test_complete")(lambda: Complete())
    with pytest.raises(ConfigError) as err:
        build("collector", {"name": "test_partial"}, key="collector")
    assert err.value.key == "collector"
    assert "Partial lacks budget_unit, sampled_buffer" in str(err.value) and "Source" in str(err.value)
    assert isinstance(build("collector", {"name": "test_complete"}), Source)


def test_every_source_meets_the_source_protocol():
    from rlrun.algos.odt import OnlineDTSource
    from rlrun.collectors.dataset import DatasetSource
    from rlrun.collectors.multiprocess import MultiCollector
    from rlrun.collectors.ray_actors import RayCollector
    from rlrun.collectors.sync import SyncCollector
    from rlrun.core.contracts import Source, protocol_members

    for cls in (SyncCollector, MultiCollector, RayCollector, DatasetSource, OnlineDTSource):
        declared = {n for c in cls.__mro__ for n in [*vars(c), *getattr(c, "__annotations__", {})]}
        instance_set = {"frames", "total_frames", "policy_version"}  # set in __init__
        missing = set(protocol_members(Source)) - declared - instance_set
        assert not missing, (cls.__name__, missing)


def test_the_old_collector_name_still_imports_with_a_deprecation_line():
    import rlrun.core.contracts as contracts

    with pytest.warns(DeprecationWarning, match="use rlrun.core.contracts.Source"):
        assert contracts.Collector is Source
    with pytest.raises(AttributeError):
        _ = contracts.Nope
