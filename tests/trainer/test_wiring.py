"""Hook order from declarations: writers before readers, impossible orders named."""

from __future__ import annotations

import pytest

from rlrun.core.errors import ConfigError
from rlrun.trainer.hooks import GAE, Hook, ObservationStats, OffPolicyReplay, OnPolicyMinibatches
from rlrun.trainer.wiring import plan

COLLECTED = {"observation", "action", "sample_log_prob", "next.observation", "next.reward",
             "next.terminated", "next.truncated", "next.done", "collector.traj_ids"}
PPO_READS = ("observation", "action", "sample_log_prob", "advantage", "value_target")


class ReadsAt(Hook):
    """Reads ``key`` at ``point`` (a stand-in for any hook with a need)."""

    def __init__(self, point: str, key: str):
        self.point, self.key = point, key

    def io(self):
        return {self.point: ((self.key,), ())}


def test_gae_moved_after_the_buffer_still_runs_before_it():
    # rlrun algo=ppo '~hooks.gae' '+hooks.gae={name:gae}': GAE last in config order
    hooks = {"buffer": OnPolicyMinibatches(PPO_READS), "observation_stats": ObservationStats(),
             "gae": GAE(0.99)}
    order = plan(hooks, COLLECTED, PPO_READS)
    assert order["pre_epoch"] == ["gae", "buffer"]
    assert order["process_batch"] == ["observation_stats"]


def test_config_order_is_kept_where_nothing_is_declared():
    a, b = ReadsAt("post_steps", "observation"), ReadsAt("post_steps", "observation")
    assert plan({"b": b, "a": a}, COLLECTED)["post_steps"] == ["b", "a"]


def test_a_reader_before_its_writers_point_names_both_hooks():
    hooks = {"gae": GAE(0.99), "early": ReadsAt("process_batch", "advantage")}
    with pytest.raises(ConfigError) as info:
        plan(hooks, COLLECTED)
    msg = info.value.message
    assert "'early'" in msg and "'gae'" in msg and "pre_epoch" in msg and "process_batch" in msg
    assert info.value.key == "hooks.early"


def test_a_key_nobody_writes_names_the_reader_and_the_key():
    # PPO without GAE: the on-policy buffer must store 'advantage' for the loss
    with pytest.raises(ConfigError) as info:
        plan({"buffer": OnPolicyMinibatches(PPO_READS)}, COLLECTED, PPO_READS)
    assert "'advantage'" in info.value.message and "'buffer'" in info.value.message
    assert "hooks.gae" in info.value.fix


def test_the_loss_reads_are_checked_at_the_optimisation_step():
    with pytest.raises(ConfigError) as info:
        plan({"buffer": OffPolicyReplay(())}, COLLECTED, ("observation", "priority"), "the loss X")
    assert "the loss X" in info.value.message and "'priority'" in info.value.message


def test_mutual_needs_are_a_cycle_error_naming_both():
    class Swap(Hook):
        def __init__(self, reads, writes):
            self.r, self.w = reads, writes

        def io(self):
            return {"post_steps": ((self.r,), (self.w,))}

    with pytest.raises(ConfigError) as info:
        plan({"x": Swap("a", "b"), "y": Swap("b", "a")}, COLLECTED)
    assert "'x'" in info.value.message and "'y'" in info.value.message


def test_after_declarations_are_respected():
    class Late(Hook):
        after = ("stats",)

        def post_steps_log(self, trainer, batch):
            pass

    class Stats(Hook):
        def post_steps_log(self, trainer, batch):
            pass

    assert plan({"late": Late(), "stats": Stats()}, COLLECTED)["post_steps_log"] == ["stats", "late"]


def test_describe_lists_each_points_hooks_with_keys_and_origin():
    from rlrun.trainer.wiring import describe

    hooks = {"buffer": OnPolicyMinibatches(("advantage",)), "gae": GAE(0.99)}
    order = plan(hooks, COLLECTED)
    text = describe(order, hooks, {"buffer": "built in", "gae": "config: hooks.gae"})
    lines = text.splitlines()
    pre = lines.index("pre_epoch:")
    assert lines[pre + 1].split()[:2] == ["gae", "GAE"] and "[config: hooks.gae]" in lines[pre + 1]
    assert "writes advantage, value_target" in lines[pre + 1]
    assert lines[pre + 2].split()[0] == "buffer" and "reads advantage" in lines[pre + 2]
    assert "post_steps:" not in lines  # points no hook implements are left out
    assert lines.index("process_optim_batch:") > pre


def test_error_texts_name_the_reader_the_writer_and_the_fix():
    # the whole text users see (key, message, fix), for each impossible order
    hooks = {"gae": GAE(0.99), "early": ReadsAt("process_batch", "advantage")}
    with pytest.raises(ConfigError) as info:
        plan(hooks, COLLECTED)
    assert str(info.value) == (
        "hooks.early: hook 'early' reads 'advantage' at process_batch, but hook 'gae' writes it only at "
        "pre_epoch, later in the loop\n  fix: hook 'early' must read it at pre_epoch or later, after 'gae', "
        "or one of the two must go (`rlrun explain <overrides>` shows every point's hooks)")
    with pytest.raises(ConfigError) as info:
        plan({"buffer": OffPolicyReplay(())}, COLLECTED, ("observation", "priority"))
    assert str(info.value) == (
        "loss: the loss reads 'priority' at process_optim_batch, but neither the collector nor any hook "
        "writes it\n  fix: add the hook that computes it (e.g. hooks.gae for 'advantage' and "
        "'value_target'); `rlrun list hook` lists them")
    # the loss reading a key a hook writes too late (after the optimisation step)
    with pytest.raises(ConfigError) as info:
        plan({"late": Writes("post_steps", "bonus")}, COLLECTED, ("bonus",))
    assert str(info.value).startswith("loss: the loss reads 'bonus' at process_optim_batch, but hook "
                                      "'late' writes it only at post_steps, later in the loop\n  fix: ")


class Writes(Hook):
    def __init__(self, point: str, key: str):
        self.point, self.key = point, key

    def io(self):
        return {self.point: ((), (self.key,))}


def test_cycle_error_text_names_the_first_stuck_hook():
    class Swap(Hook):
        def __init__(self, reads, writes):
            self.r, self.w = reads, writes

        def io(self):
            return {"post_steps": ((self.r,), (self.w,))}

    hooks = {"free": ReadsAt("post_steps", "observation"), "x": Swap("a", "b"), "y": Swap("b", "a")}
    with pytest.raises(ConfigError) as info:
        plan(hooks, COLLECTED | {"a", "b"})
    assert str(info.value) == ("hooks.x: hooks 'x' and 'y' each need the other to run first at post_steps"
                               "\n  fix: remove hooks.x or hooks.y")


def test_after_naming_an_absent_hook_is_ignored():
    class Late(Hook):
        after = ("evaluation", "late")  # no evaluation hook in this run; itself: ignored

        def post_steps_log(self, trainer, batch):
            pass

    class Other(Hook):
        def post_steps_log(self, trainer, batch):
            pass

    assert plan({"late": Late(), "other": Other()}, COLLECTED)["post_steps_log"] == ["late", "other"]


def test_describe_text_whole():
    from rlrun.trainer.wiring import describe

    class Both(Hook):
        def io(self):
            return {"post_steps": (("observation", "action"), ("bonus",))}

    hooks = {"both": Both(), "reader": ReadsAt("post_steps", "bonus"), "silent": ObservationStats()}
    order = plan(hooks, COLLECTED)
    text = describe(order, hooks, {"both": "config: hooks.both"})
    assert text.splitlines() == [
        "process_batch:",
        f"  {'silent':<18} {'ObservationStats':<16} []  reads observation",
        "post_steps:",
        f"  {'both':<18} {'Both':<16} [config: hooks.both]  reads observation, action  writes bonus",
        f"  {'reader':<18} {'ReadsAt':<16} []  reads bonus",
        f"  {'silent':<18} {'ObservationStats':<16} []",
    ]
