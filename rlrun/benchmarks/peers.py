"""The settings mapping to the peers, written once: rlrun <-> Stable-Baselines3 (and SBX, its JAX twin).

Every fidelity and end-to-end pairing (``rlrun.benchmarks.fidelity``, ``end_to_end``) takes its
settings from here. A task names its canonical values once (``TASKS``); ``mapping(task)`` turns
each into a ``Setting`` row that says, side by side, the Hydra overrides rlrun gets and the
keyword arguments the peer gets. Both sides are always given every value explicitly, so a
change of rlrun's presets or of a peer's defaults cannot silently unpair them. ``DIFFERENCES``
lists, per algorithm, what no setting can map (a real difference of the implementations).

The peer side runs in a child process of an interpreter that has the peer installed
(``--peer-python``), so this module imports nothing heavy at import time: the peer's values are
plain data (``("linear", 1e-3)`` for an annealed rate, ``"tanh"`` for an activation) that
``peer_kwargs`` turns into the peer's objects (torch or flax/optax) inside that child.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

EVAL_EPISODES, EVAL_SEED_OFFSET = 10, 1_000_003  # as rlrun's Evaluator (rlrun/trainer/builtins.py)
PEERS = ("sb3", "sbx")


@dataclass(frozen=True)
class Setting:
    """One setting on both sides: its value, rlrun's overrides and the peer's keyword arguments.

    ``peer`` keys are dotted paths into the peer's constructor (``policy_kwargs.net_arch``);
    ``env.n_envs`` goes to ``make_vec_env``. An empty side is fixed by that library (``note``).
    """

    name: str
    value: Any
    rlrun: tuple[str, ...]
    peer: dict[str, Any]
    note: str = ""


@dataclass(frozen=True)
class Task:
    """A fidelity task: an algorithm on an env at a budget, with its canonical settings."""

    name: str
    algo: str
    env: str  # rlrun's env preset
    env_id: str  # gymnasium id, the peer's env
    frames: int  # budget, a whole number of batches on both sides
    eval_interval: int  # frames between evaluations, a whole number of batches
    random_return: float  # a uniform random policy's return (the equivalence margin's scale)
    solved_return: float
    values: dict[str, Any] = field(default_factory=dict)
    sbx: bool = True  # SBX implements it (SBX has no A2C)


# fmt: off
ON_POLICY = {"net": [64, 64], "activation": "tanh", "ortho_init": True, "obs_norm": False,
             "clip_vf": None, "ent_coef": 0.0, "critic_coef": 0.5, "max_grad_norm": 0.5,
             "normalize_advantage": True}
OFF_POLICY = {"net": [256, 256], "activation": "relu", "lr": 3e-4, "adam_eps": 1e-8, "buffer": 1_000_000,
              "batch": 256, "tau": 0.005, "gamma": 0.99, "learning_starts": 1000, "n_steps": 200,
              "updates": 200}
TASKS: dict[str, Task] = {t.name: t for t in [
    Task("ppo_cartpole", "ppo", "cartpole", "CartPole-v1", 102_400, 10_240, 22.0, 500.0, {
        **ON_POLICY, "n_envs": 8, "n_steps": 128, "minibatch": 256, "epochs": 10, "gamma": 0.98,
        "gae_lambda": 0.8, "lr": 1e-3, "lr_schedule": "linear", "adam_eps": 1e-5, "clip": 0.2}),
    Task("a2c_cartpole", "a2c", "cartpole", "CartPole-v1", 200_000, 10_000, 22.0, 500.0, {
        **ON_POLICY, "n_envs": 8, "n_steps": 5, "minibatch": 40, "epochs": 1, "gamma": 0.99,
        "gae_lambda": 1.0, "lr": 7e-4, "lr_schedule": "constant", "adam_eps": 1e-8}, sbx=False),
    Task("dqn_cartpole", "dqn", "cartpole", "CartPole-v1", 100_000, 10_000, 22.0, 500.0, {
        "net": [120, 84], "activation": "relu", "lr": 2.5e-4, "lr_schedule": "constant", "adam_eps": 1e-8,
        "buffer": 10_000, "batch": 128, "gamma": 0.99, "learning_starts": 5000, "n_steps": 100,
        "updates": 25, "target_interval_frames": 500, "eps_init": 1.0, "eps_end": 0.05,
        "eps_frames": 25_000, "max_grad_norm": 10.0, "double": False}),
    Task("sac_pendulum", "sac", "pendulum", "Pendulum-v1", 20_000, 2_000, -1230.0, -150.0, {
        **OFF_POLICY, "init_alpha": 1.0}),
    Task("td3_pendulum", "td3", "pendulum", "Pendulum-v1", 20_000, 2_000, -1230.0, -150.0, {
        **OFF_POLICY, "noise": 0.1, "policy_delay": 2, "target_noise": 0.2, "noise_clip": 0.5}),
    Task("ddpg_pendulum", "ddpg", "pendulum", "Pendulum-v1", 20_000, 2_000, -1230.0, -150.0, {
        **OFF_POLICY, "ou_sigma": 0.02, "ou_theta": 0.15}),
    Task("ppo_halfcheetah", "ppo", "halfcheetah", "HalfCheetah-v5", 204_800, 20_480, -280.0, 1500.0, {
        **ON_POLICY, "n_envs": 1, "n_steps": 2048, "minibatch": 64, "epochs": 10, "gamma": 0.99,
        "gae_lambda": 0.95, "lr": 3e-4, "lr_schedule": "constant", "adam_eps": 1e-5, "clip": 0.2}),
    Task("sac_halfcheetah", "sac", "halfcheetah", "HalfCheetah-v5", 50_000, 5_000, -280.0, 4000.0, {
        **OFF_POLICY, "learning_starts": 10_000, "n_steps": 1000, "updates": 1000, "init_alpha": 1.0}),
]}
# fmt: on
CHEAP = ("ppo_cartpole", "a2c_cartpole", "dqn_cartpole")
"""The tasks the CPU budget of one machine covers with 10 seeds a side (README: measured costs)."""

DIFFERENCES: dict[str, list[str]] = {
    "common": [
        "Vector envs: rlrun steps gymnasium's SyncVectorEnv with same-step autoreset; SB3 its DummyVecEnv "
        "(Monitor-wrapped). Both bootstrap from the true final observation at a truncation and not at a "
        "termination, so the targets agree; the random streams (env resets, sampling, init) do not: "
        "seed i is a different draw on each side, which is why the comparison is over seeds.",
        "Evaluation: the same function on both sides (10 deterministic episodes on envs seeded "
        f"seed + {EVAL_SEED_OFFSET}, after the batch's updates, at the same frame counts).",
    ],
    "ppo": [
        "Value loss: rlrun's is critic_coef * 0.5 * (V - R)^2, SB3's vf_coef * (V - R)^2: mapped "
        "(vf_coef = critic_coef / 2), not a difference.",
        "SBX only: gradient norms are clipped per network (actor and critic have their own optax "
        "chains); rlrun and SB3 clip the joint norm of both.",
        "SBX only: the orthogonal initialisation uses flax's initialisers (same gains, other draws).",
    ],
    "a2c": ["Value loss mapped as PPO's (vf_coef = critic_coef / 2). SBX has no A2C."],
    "dqn": [
        "Exploration schedule: rlrun counts epsilon's frames from the end of the random warm-up "
        "(1.0 at 5k frames, 0.05 at 30k); SB3 from frame 0 (exploration_fraction = 30k / budget: 0.05 at "
        "30k too, but 0.84 at 5k). The end point is mapped, the slope cannot be.",
        "Target copies: rlrun counts updates (every 125), SB3 env steps from step 0 (every 500): the same "
        "500-frame period; SB3's copies fall at multiples of 500 frames, rlrun's after the 125th update "
        "of each period, up to one batch apart.",
        "Double DQN is off on the rlrun side here: SB3's DQN has no double-Q target.",
        "SBX only: no gradient clipping (its DQN has no max_grad_norm).",
    ],
    "sac": [
        "One backward pass: rlrun steps actor, critics and temperature from losses computed at the same "
        "parameters; SB3 steps the temperature, then the critics, then computes the actor's loss with "
        "the updated critics. The same fixed point, a different order within an update.",
        "log-std clamp: rlrun [-5, 2], SB3 [-20, 2] (not a setting on either side).",
    ],
    "td3": ["Order within an update as SAC's (rlrun: one backward pass; SB3: critic step first)."],
    "ddpg": [
        "OU noise: rlrun scales OU(sigma 0.2) by epsilon (1.0 -> 0.1 over 1000 frames in its preset); SB3 "
        "has no schedule. Mapped as a fixed noise: rlrun sigma 0.02 with epsilon 1, SB3 sigma 0.02 "
        "(OU is linear in sigma), so the pairing uses the preset's end noise from the start.",
        "Order within an update as SAC's.",
    ],
}


def _act(name: str) -> tuple[str, ...]:
    return (f"model.activation={name}",)


def _hidden(net: list[int]) -> str:
    return "[" + ",".join(str(h) for h in net) + "]"


def mapping(task: Task) -> list[Setting]:
    """Every setting of ``task`` on both sides (rows in the order the README table prints them)."""
    v, algo = task.values, task.algo
    rows = [
        Setting(
            "budget (frames)", task.frames, (f"total_frames={task.frames}",), {"total_timesteps": task.frames}
        ),
        Setting("discount", v["gamma"], (f"gamma={v['gamma']}",), {"gamma": v["gamma"]}),
        Setting(
            "hidden layers",
            v["net"],
            (f"model.hidden={_hidden(v['net'])}",),
            {
                "policy_kwargs.net_arch": (
                    dict(pi=v["net"], vf=v["net"]) if algo in ("ppo", "a2c") else v["net"]
                )
            },
        ),
        Setting(
            "activation",
            v["activation"],
            _act(v["activation"]),
            {"policy_kwargs.activation_fn": v["activation"]},
        ),
        Setting(
            "optimiser, eps",
            ("adam", v["adam_eps"]),
            ("optim.name=adam", f"optim.eps={v['adam_eps']}"),
            {"policy_kwargs.optimizer": ("adam", v["adam_eps"])},
        ),
        Setting(
            "observation normalisation",
            False,
            ("model.normalize_observations=false",),
            {},
            "SB3: no VecNormalize wrapper",
        ),
    ]
    if algo in ("ppo", "a2c"):
        rows += [
            Setting(
                "parallel envs", v["n_envs"], (f"env.num_envs={v['n_envs']}",), {"env.n_envs": v["n_envs"]}
            ),
            Setting(
                "steps per env per batch",
                v["n_steps"],
                (f"collector.frames_per_batch={v['n_steps'] * v['n_envs']}",),
                {"n_steps": v["n_steps"]},
            ),
            Setting(
                "lr, schedule",
                (v["lr"], v["lr_schedule"]),
                (f"optim.lr={v['lr']}", f"optim.lr_schedule={v['lr_schedule']}"),
                {"learning_rate": (v["lr_schedule"], v["lr"])},
                "linear: to 0 at the budget, set per batch",
            ),
            Setting(
                "GAE lambda, once per batch",
                v["gae_lambda"],
                (f"hooks.gae.lmbda={v['gae_lambda']}", "hooks.gae.every_epoch=false"),
                {"gae_lambda": v["gae_lambda"]},
                "SB3 computes advantages once per rollout",
            ),
            Setting(
                "advantage normalisation",
                v["normalize_advantage"],
                (f"loss.normalize_advantage={str(v['normalize_advantage']).lower()}",),
                {"normalize_advantage": v["normalize_advantage"]},
            ),
            Setting(
                "entropy coefficient",
                v["ent_coef"],
                (f"loss.entropy_coef={v['ent_coef']}",),
                {"ent_coef": v["ent_coef"]},
            ),
            Setting(
                "value loss weight",
                v["critic_coef"],
                (f"loss.critic_coef={v['critic_coef']}",),
                {"vf_coef": v["critic_coef"] / 2},
                "rlrun's value loss has a 0.5 in it, SB3's not",
            ),
            Setting(
                "max grad norm (joint)",
                v["max_grad_norm"],
                (f"optim.max_grad_norm={v['max_grad_norm']}",),
                {"max_grad_norm": v["max_grad_norm"]},
            ),
            Setting(
                "orthogonal init (sqrt 2 hidden, 0.01 policy, 1 value)",
                v["ortho_init"],
                (f"model.orthogonal_init={str(v['ortho_init']).lower()}",),
                {"policy_kwargs.ortho_init": v["ortho_init"]},
            ),
            Setting(
                "separate actor and critic networks",
                True,
                ("model.critic_hidden=null",),
                {"policy_kwargs.share_features_extractor": True},
                "the flatten extractor has no weights",
            ),
            Setting("initial log-std", 0.0, ("model.init_log_std=0.0",), {"policy_kwargs.log_std_init": 0.0}),
        ]
        if algo == "ppo":
            rows += [
                Setting(
                    "epochs per batch",
                    v["epochs"],
                    (f"trainer.epochs_per_batch={v['epochs']}",),
                    {"n_epochs": v["epochs"]},
                ),
                Setting(
                    "minibatch",
                    v["minibatch"],
                    (f"buffer.batch_size={v['minibatch']}",),
                    {"batch_size": v["minibatch"]},
                ),
                Setting(
                    "clip range (constant)",
                    v["clip"],
                    (f"loss.clip_epsilon={v['clip']}",),
                    {"clip_range": v["clip"]},
                ),
                Setting(
                    "value clipping",
                    None,
                    ("loss.critic_loss=l2",),
                    {"clip_range_vf": None},
                    "none on either side",
                ),
            ]
        else:
            rows += [
                Setting(
                    "one update per batch (whole batch)",
                    v["minibatch"],
                    (f"buffer.batch_size={v['minibatch']}", "trainer.epochs_per_batch=1"),
                    {"use_rms_prop": False},
                    "SB3's A2C: one gradient step per rollout, Adam",
                )
            ]
        return rows
    rows += [
        Setting(
            "lr",
            v["lr"],
            (f"optim.lr={v['lr']}", f"optim.lr_schedule={v.get('lr_schedule', 'constant')}"),
            {"learning_rate": (v.get("lr_schedule", "constant"), v["lr"])},
        ),
        Setting(
            "replay buffer",
            v["buffer"],
            (f"buffer.capacity={v['buffer']}", "buffer.name=replay", "buffer.sampler=uniform"),
            {"buffer_size": v["buffer"]},
        ),
        Setting("batch", v["batch"], (f"buffer.batch_size={v['batch']}",), {"batch_size": v["batch"]}),
        Setting(
            "random warm-up frames",
            v["learning_starts"],
            (f"collector.init_random_frames={v['learning_starts']}",
             f"trainer.learning_starts={v['learning_starts'] + 1}"),
            {"learning_starts": v["learning_starts"]},
            "SB3 first trains once num_timesteps > learning_starts (the batch after the warm-up)",
        ),
        Setting(
            "frames per batch, updates per batch",
            (v["n_steps"], v["updates"]),
            (
                f"collector.frames_per_batch={v['n_steps']}",
                f"trainer.updates_per_frame={v['updates'] / v['n_steps']}",
                "env.num_envs=1",
            ),
            {"train_freq": v["n_steps"], "gradient_steps": v["updates"], "env.n_envs": 1},
        ),
    ]
    if algo == "dqn":
        interval_updates = round(v["target_interval_frames"] * v["updates"] / v["n_steps"])
        rows += [
            Setting(
                "target copy every (frames)",
                v["target_interval_frames"],
                (f"hooks.target_update.interval_updates={interval_updates}", "loss.tau=1.0"),
                {"target_update_interval": v["target_interval_frames"], "tau": 1.0},
            ),
            Setting(
                "epsilon init -> end over frames after warm-up",
                (v["eps_init"], v["eps_end"], v["eps_frames"]),
                (
                    f"exploration.eps_init={v['eps_init']}",
                    f"exploration.eps_end={v['eps_end']}",
                    f"exploration.annealing_frames={v['eps_frames']}",
                ),
                {
                    "exploration_initial_eps": v["eps_init"],
                    "exploration_final_eps": v["eps_end"],
                    "exploration_fraction": (v["learning_starts"] + v["eps_frames"]) / task.frames,
                },
                "end point mapped; see DIFFERENCES",
            ),
            Setting(
                "max grad norm",
                v["max_grad_norm"],
                (f"optim.max_grad_norm={v['max_grad_norm']}",),
                {"max_grad_norm": v["max_grad_norm"]},
            ),
            Setting(
                "loss, target",
                ("huber", "double" if v["double"] else "max"),
                ("loss.loss=huber", f"loss.double={str(v['double']).lower()}"),
                {},
                "SB3: smooth L1 on max_a Q_target (no double-Q)",
            ),
        ]
        return rows
    rows += [
        Setting(
            "polyak tau",
            v["tau"],
            (f"loss.tau={v['tau']}", "hooks.target_update.interval_updates=1"),
            {"tau": v["tau"]},
        ),
        Setting(
            "critics",
            1 if algo == "ddpg" else 2,
            (f"model.num_q={1 if algo == 'ddpg' else 2}",),
            {} if algo == "ddpg" else {"policy_kwargs.n_critics": 2},
            "SB3's DDPG: one critic",
        ),
    ]
    if algo == "sac":
        rows += [
            Setting(
                "temperature: learned, initial, target entropy",
                v["init_alpha"],
                (f"loss.init_alpha={v['init_alpha']}", "loss.learn_alpha=true", "loss.target_entropy=null"),
                {"ent_coef": f"auto_{v['init_alpha']}", "target_entropy": "auto"},
                "target -|A| on both",
            )
        ]
    elif algo == "td3":
        rows += [
            Setting(
                "exploration N(0, sigma)",
                v["noise"],
                (f"exploration.sigma={v['noise']}", "exploration.eps_init=1.0", "exploration.eps_end=1.0"),
                {"action_noise": ("normal", v["noise"])},
            ),
            Setting(
                "policy delay, target noise, clip",
                (v["policy_delay"], v["target_noise"], v["noise_clip"]),
                (
                    f"loss.policy_delay={v['policy_delay']}",
                    f"loss.target_noise={v['target_noise']}",
                    f"loss.noise_clip={v['noise_clip']}",
                ),
                {
                    "policy_delay": v["policy_delay"],
                    "target_policy_noise": v["target_noise"],
                    "target_noise_clip": v["noise_clip"],
                },
            ),
        ]
    else:
        rows += [
            Setting(
                "OU noise sigma, theta, dt (fixed scale)",
                (v["ou_sigma"], v["ou_theta"], 1.0),
                (
                    f"exploration.sigma={v['ou_sigma']}",
                    f"exploration.theta={v['ou_theta']}",
                    "exploration.dt=1.0",
                    "exploration.eps_init=1.0",
                    "exploration.eps_end=1.0",
                ),
                {"action_noise": ("ou", v["ou_sigma"], v["ou_theta"], 1.0)},
                "see DIFFERENCES",
            )
        ]
    return rows


def warmup(task: Task, frames: int | None = None) -> int:
    """Random warm-up frames at budget ``frames``: the task's, shrunk in proportion for a shorter run."""
    start = task.values.get("learning_starts", 0)
    return start if frames is None else start * frames // task.frames


def updates(task: Task, frames: int | None = None) -> int:
    """Optimiser steps both sides take at budget ``frames`` (critic steps for off-policy algorithms)."""
    v, frames = task.values, frames or task.frames
    batch = v["n_steps"] * v.get("n_envs", 1)
    if task.algo in ("ppo", "a2c"):
        return frames // batch * v.get("epochs", 1) * (batch // v["minibatch"])
    return max(0, frames - warmup(task, frames)) // batch * v["updates"]


def rlrun_overrides(task: Task) -> list[str]:
    """rlrun's side of ``task``: its presets plus every mapped setting, explicitly."""
    return [f"algo={task.algo}", f"env={task.env}", *(o for s in mapping(task) for o in s.rlrun)]


def peer_spec(task: Task) -> dict[str, Any]:
    """The peer's side of ``task`` as plain data: ``{"env": {...}, "learn": {...}, "model": {...}}``."""
    model: dict[str, Any] = {}
    env: dict[str, Any] = {"n_envs": 1}
    learn: dict[str, Any] = {}
    for s in mapping(task):
        for key, value in s.peer.items():
            if key.startswith("env."):
                env[key[4:]] = value
            elif key == "total_timesteps":
                learn[key] = value
            else:
                target = model
                *path, last = key.split(".")
                for part in path:
                    target = target.setdefault(part, {})
                target[last] = value
    return {"env": env, "learn": learn, "model": model}


def table(task: Task) -> str:
    """The mapping of ``task`` as a Markdown table (setting, value, rlrun, peer, note)."""
    lines = ["| setting | value | rlrun | SB3 / SBX | note |", "|---|---|---|---|---|"]
    for s in mapping(task):
        peer = ", ".join(f"`{k}={v}`" for k, v in s.peer.items()) or "(fixed)"
        lines.append(f"| {s.name} | {s.value} | {', '.join(f'`{o}`' for o in s.rlrun)} | {peer} | {s.note} |")
    return "\n".join(lines)
