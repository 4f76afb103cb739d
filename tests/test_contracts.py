"""The contracts hold: components meet their Protocols, and nothing reaches into another's insides."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import rlrun
from rlrun.contracts import Buffer, Collector, Logger, Loss
from rlrun.registry import build, entries

PACKAGE = Path(rlrun.__file__).parent


def test_no_module_reaches_into_other_components():
    """Hooks and the lifecycle use the trainer's public members and the policy, never private
    attributes or a path through the loss (``loss.models``) or the logger (``logger.client``)."""
    pattern = re.compile(r"\btrainer\._|\.models\.|logger\.client|\bloss\.policy\b")
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
    from rlrun.collectors import SyncCollector

    env = make_counter_env(2)
    collector = SyncCollector(env, lambda o: {"action": torch.zeros(2, dtype=torch.long)}, 4, 8)
    buffer = build("buffer", {"name": "replay", "capacity": 8, "batch_size": 2})
    logger = build("logger", {"name": "csv"}, run_dir=tmp_path)
    assert isinstance(collector, Collector) and isinstance(buffer, Buffer) and isinstance(logger, Logger)
    logger.finish()


@pytest.mark.parametrize("name", ["ppo", "a2c", "sac", "td3", "ddpg", "dqn"])
def test_loss_and_evaluation_share_one_policy_object(name, tmp_path):
    from rlrun.build import build_run
    from rlrun.explain import compose_config

    env = "cartpole" if name in ("ppo", "a2c", "dqn") else "pendulum"
    cfg = compose_config([f"algo={name}", f"env={env}", "eval.episodes=1", "buffer.capacity=null"
                          if name in ("ppo", "a2c") else "buffer.capacity=1000"])
    run = build_run(cfg, tmp_path, torch.device("cpu"))
    try:
        assert run.loss.policy is run.policy
        assert all(p is q for p, q in zip(run.loss.policy.parameters(), run.policy.parameters()))
    finally:
        run.close()


def test_key_map_places_per_agent_entries_under_the_group_and_shared_ones_at_the_root():
    from rlrun.contracts import KeyMap
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
