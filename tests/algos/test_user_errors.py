"""The exact text users see for each wrong setting a loss or built-in component rejects.

The CLI prints ``key: message`` and ``fix: ...`` (``RlrunError.render``) and exits with code 2; the
key names what to change and the fix says how, so both are part of the interface, pinned here
whole, for every raise in the mutation-tested modules that a config can reach.
"""

from __future__ import annotations

import pytest

from rlrun.algos.a2c import A2CLoss
from rlrun.algos.dqn import DQNLoss
from rlrun.algos.impala import IMPALALoss
from rlrun.algos.iql import IQLLoss
from rlrun.algos.marl import GroupQLoss, MADDPGLoss
from rlrun.algos.marl_losses import MultiAgentQLoss, make_q_mixer
from rlrun.algos.ppo import PPOLoss
from rlrun.algos.td3 import DDPGLoss, TD3Loss
from rlrun.core.errors import ConfigError
from rlrun.core.policy import Policy
from rlrun.core.specs import EnvSpec
from rlrun.modules.group_models import GroupPolicy
from rlrun.modules.models import actor_critic, actor_twin_q, qnet
from rlrun.modules.multiagent import GroupActor, GroupMLP
from rlrun.trainer.hooks import make_target_update

SPEC_D = EnvSpec((3,), "float32", True, 2)
SPEC_C = EnvSpec((3,), "float32", False, 2)
NOT_A_GROUP = ("model.name: loss={} trains agent groups, but model=Policy is single-agent\n"
               "  fix: use the algorithm's own model (e.g. algo=mappo sets model=group_actor_critic)")


def no_critic():
    return Policy(actor_critic(SPEC_D, hidden=[4]).actor)


def marl_ppo_two_outputs():
    actor = GroupActor(GroupMLP(2, 3, 2, []), "categorical", 2)
    return PPOLoss(GroupPolicy(actor, GroupMLP(2, 3, 2, [])))


CASES = {
    "a2c_no_critic": (lambda: A2CLoss(no_critic()),
                      "model.name: A2C needs a value critic\n  fix: use model=actor_critic"),
    "ppo_no_critic": (lambda: PPOLoss(no_critic()),
                      "model.name: PPO needs a value critic\n  fix: use model=actor_critic"),
    "ppo_critic_loss": (lambda: PPOLoss(actor_critic(SPEC_D, hidden=[4]), critic_loss="l1"),
                        "loss.critic_loss: unknown critic_loss 'l1'\n  fix: use l2 or smooth_l1"),
    "dqn_loss": (lambda: DQNLoss(qnet(SPEC_D, hidden=[4]), gamma=0.9, loss="mse"),
                 "loss.loss: unknown loss 'mse'\n  fix: use huber or l2"),
    "td3_stochastic": (lambda: TD3Loss(actor_twin_q(SPEC_C, hidden=[4]), gamma=0.9),
                       "model.head: TD3 needs a deterministic actor\n  fix: set model.head=deterministic"),
    "ddpg_stochastic": (lambda: DDPGLoss(actor_twin_q(SPEC_C, hidden=[4]), gamma=0.9),
                        "model.head: DDPG needs a deterministic actor\n  fix: set model.head=deterministic"),
    "ddpg_twin_q": (lambda: DDPGLoss(actor_twin_q(SPEC_C, hidden=[4], head="deterministic"), gamma=0.9),
                    "model.num_q: DDPG uses one Q network\n  fix: set model.num_q=1"),
    "marl_critic_outputs": (marl_ppo_two_outputs,
                            "model.critic: the critic has 2 outputs per agent, not 1\n"
                            "  fix: build the critic GroupMLP with out_dim=1"),
    "marl_q_loss": (lambda: MultiAgentQLoss(GroupMLP(2, 3, 4, []), loss="mse"),
                    "loss.loss: unknown loss 'mse'\n  fix: use l2 or huber"),
    "qmix_no_state": (lambda: make_q_mixer("qmix", 3),
                      "loss.mixer: QMIX needs a global state\n"
                      "  fix: use an env with a global state (VMAS provides one) or loss.mixer=vdn"),
    "unknown_mixer": (lambda: make_q_mixer("qtran", 3),
                      "loss.mixer: unknown mixer 'qtran'\n  fix: use none, vdn or qmix"),
    "marl_q_single_agent": (lambda: GroupQLoss(qnet(SPEC_D, hidden=[4]), SPEC_D, gamma=0.9),
                            NOT_A_GROUP.format("marl_q")),
    "maddpg_single_agent": (lambda: MADDPGLoss(actor_twin_q(SPEC_C, hidden=[4]), gamma=0.9),
                            NOT_A_GROUP.format("maddpg")),
    "impala_no_critic": (lambda: IMPALALoss(no_critic()),
                         "model.name: IMPALA needs a value critic\n"
                         "  fix: use model=actor_critic or model=actor_critic_cnn"),
    "target_update_without_targets": (
        lambda: make_target_update(PPOLoss(actor_critic(SPEC_D, hidden=[4]))),
        "hooks.target_update: the loss PPOLoss has no target networks\n  fix: remove hooks.target_update"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_config_error_text(case):
    make, text = CASES[case]
    with pytest.raises(ConfigError) as info:
        make()
    assert str(info.value) == text


def test_iql_expectile_error_names_the_bound_and_the_value():
    with pytest.raises(ConfigError) as info:
        IQLLoss(actor_twin_q(SPEC_C, hidden=[4]), SPEC_C, gamma=0.99, expectile=1.0)
    assert str(info.value) == ("loss.expectile: must be in (0, 1), got 1.0\n"
                               "  fix: e.g. 0.7 (MuJoCo) or 0.9 (AntMaze)")
