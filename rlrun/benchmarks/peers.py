"""The settings mapping to the peers, written once: rlrun <-> Stable-Baselines3 (and SBX, its JAX twin).

Every fidelity and end-to-end pairing (``rlrun.benchmarks.fidelity``, ``end_to_end``) takes its
settings from here. A task names its canonical values once (``TASKS``); one table (``ROWS``) says
per setting which value goes to which Hydra key and which peer keyword, and ``mapping(task)``
reads it into ``Setting`` rows, side by side. Both sides are always given every value explicitly, so a
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
    # conf/tuned/dqn_cartpole.yaml (issue 43's preset that stays solved), double-Q off (SB3 has none)
    Task("dqn_cartpole_tuned", "dqn", "cartpole", "CartPole-v1", 100_000, 10_000, 22.0, 500.0, {
        "net": [120, 84], "activation": "relu", "lr": 0.0014712651866761934, "lr_schedule": "linear",
        "adam_eps": 1e-8, "buffer": 10_000, "batch": 64, "gamma": 0.99, "learning_starts": 5000,
        "n_steps": 100, "updates": 50, "target_interval_frames": 178, "eps_init": 1.0, "eps_end": 0.01,
        "eps_frames": 10_000, "max_grad_norm": 10.0, "double": False}),
    Task("sac_pendulum", "sac", "pendulum", "Pendulum-v1", 10_000, 1_000, -1230.0, -150.0, {
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
        "Exploration schedule: rlrun counts epsilon's frames from the end of the random warm-up, SB3 from "
        "frame 0 (exploration_fraction = (warm-up + annealing frames) / budget). Mapped as one line: "
        "rlrun's eps_init is SB3's epsilon at the warm-up's end (0.84 for dqn_cartpole, 0.67 for "
        "dqn_cartpole_tuned); before that both act uniformly at random.",
        "Double DQN is off on the rlrun side here: SB3's DQN has no double-Q target.",
        "SBX only: no gradient clipping (its DQN has no max_grad_norm).",
    ],
    "sac": [
        "One backward pass: rlrun steps actor, critics and temperature from losses computed at the same "
        "parameters; SB3 steps the temperature, then the critics, then computes the actor's loss with "
        "the updated critics. The same fixed point, a different order within an update.",
        "log-std clamp: rlrun [-5, 2], SB3 [-20, 2] (not a setting on either side). Measured inactive "
        "on HalfCheetah (sac_probe, seeds 0-2): the lowest log-std head of a run is -3.1 to -3.4 in both.",
        "tanh correction of the log-probability: rlrun the exact, stable 2 (log 2 - u - softplus(-2u)); "
        "SB3 log(1 - tanh(u)^2 + 1e-6), which caps the penalty of a saturated action. Measured negligible "
        "on HalfCheetah (sac_probe, seeds 0-2): at most 0.07 % of pre-tanh entries pass |u| = 6 in either "
        "library, a mean log-probability gap of at most 1.6e-3 nats.",
    ],
    "td3": [
        "Order within an update as SAC's (rlrun: one backward pass; SB3: critic step first).",
        "Warm-up actions: SB3 adds its action noise to the uniform random warm-up actions (then clips to "
        "the bounds); rlrun's warm-up actions are plain uniform and its noise starts with the policy.",
    ],
    "ddpg": [
        "OU noise: rlrun scales OU(sigma 0.2) by epsilon (1.0 -> 0.1 over 1000 frames in its preset); SB3 "
        "has no schedule. Mapped as a fixed noise: rlrun sigma 0.02 with epsilon 1, SB3 sigma 0.02 "
        "(OU is linear in sigma), so the pairing uses the preset's end noise from the start.",
        "Order within an update as SAC's.",
        "Warm-up actions as TD3's: SB3's OU process already runs (and is added) during the warm-up, "
        "rlrun's starts at the mean when the policy takes over.",
    ],
}


ON, OFF, CONT = ("ppo", "a2c"), ("sac", "td3", "ddpg", "dqn"), ("sac", "td3", "ddpg")
ALL = ON + OFF


@dataclass(frozen=True)
class Row:
    """One line of the mapping table, in terms of a task's values (``values``: its own and derived).

    ``value`` names the value shown (a tuple of names: a tuple of values); ``rlrun`` maps Hydra keys
    and ``peer`` the peer's dotted keys to the value each gets; ``fixed`` are literal overrides.
    """

    algos: tuple[str, ...]
    name: str
    value: str | tuple[str, ...]
    rlrun: dict[str, str]
    peer: dict[str, str]
    note: str = ""
    fixed: tuple[str, ...] = ()

    def setting(self, v: dict[str, Any]) -> Setting:
        shown = tuple(v[k] for k in self.value) if isinstance(self.value, tuple) else v[self.value]
        overrides = (*self.fixed, *(f"{key}={_hydra(v[name])}" for key, name in self.rlrun.items()))
        peer = {key: v[name] for key, name in self.peer.items()}
        return Setting(self.name, shown, overrides, peer, self.note)


# fmt: off
ROWS: list[Row] = [
    Row(ALL, "budget (frames)", "frames", {"total_frames": "frames"}, {"total_timesteps": "frames"}),
    Row(ALL, "discount", "gamma", {"gamma": "gamma"}, {"gamma": "gamma"}),
    Row(ALL, "hidden layers", "net", {"model.hidden": "net"}, {"policy_kwargs.net_arch": "net_arch"}),
    Row(ALL, "activation", "activation", {"model.activation": "activation"},
        {"policy_kwargs.activation_fn": "activation"}),
    Row(ALL, "optimiser, eps", "optimizer", {"optim.eps": "adam_eps"},
        {"policy_kwargs.optimizer": "optimizer"}, fixed=("optim.name=adam",)),
    Row(ALL, "observation normalisation", "obs_norm", {"model.normalize_observations": "obs_norm"}, {},
        "SB3: no VecNormalize wrapper"),
    # on-policy
    Row(ON, "parallel envs", "n_envs", {"env.num_envs": "n_envs"}, {"env.n_envs": "n_envs"}),
    Row(ON, "steps per env per batch", "n_steps", {"collector.frames_per_batch": "batch_frames"},
        {"n_steps": "n_steps"}),
    Row(ON, "lr, schedule", ("lr", "lr_schedule"), {"optim.lr": "lr", "optim.lr_schedule": "lr_schedule"},
        {"learning_rate": "lr_spec"}, "linear: to 0 at the budget, set per batch"),
    Row(ON, "GAE lambda, once per batch", "gae_lambda", {"hooks.gae.lmbda": "gae_lambda"},
        {"gae_lambda": "gae_lambda"}, "SB3 computes advantages once per rollout",
        fixed=("hooks.gae.every_epoch=false",)),
    Row(ON, "advantage normalisation", "normalize_advantage",
        {"loss.normalize_advantage": "normalize_advantage"},
        {"normalize_advantage": "normalize_advantage"}),
    Row(ON, "entropy coefficient", "ent_coef", {"loss.entropy_coef": "ent_coef"}, {"ent_coef": "ent_coef"}),
    Row(ON, "value loss weight", "critic_coef", {"loss.critic_coef": "critic_coef"}, {"vf_coef": "vf_coef"},
        "rlrun's value loss has a 0.5 in it, SB3's not"),
    Row(ON, "max grad norm (joint)", "max_grad_norm", {"optim.max_grad_norm": "max_grad_norm"},
        {"max_grad_norm": "max_grad_norm"}),
    Row(ON, "orthogonal init (sqrt 2 hidden, 0.01 policy, 1 value)", "ortho_init",
        {"model.orthogonal_init": "ortho_init"}, {"policy_kwargs.ortho_init": "ortho_init"}),
    Row(ON, "separate actor and critic networks", "separate", {},
        {"policy_kwargs.share_features_extractor": "separate"}, "the flatten extractor has no weights",
        fixed=("model.critic_hidden=null",)),
    Row(ON, "initial log-std", "log_std_init", {"model.init_log_std": "log_std_init"},
        {"policy_kwargs.log_std_init": "log_std_init"}),
    Row(("ppo",), "epochs per batch", "epochs", {"trainer.epochs_per_batch": "epochs"},
        {"n_epochs": "epochs"}),
    Row(("ppo",), "minibatch", "minibatch", {"buffer.batch_size": "minibatch"}, {"batch_size": "minibatch"}),
    Row(("ppo",), "clip range (constant)", "clip", {"loss.clip_epsilon": "clip"}, {"clip_range": "clip"}),
    Row(("ppo",), "value clipping", "clip_vf", {}, {"clip_range_vf": "clip_vf"}, "none on either side",
        fixed=("loss.critic_loss=l2",)),
    Row(("a2c",), "one update per batch (whole batch)", "minibatch", {"buffer.batch_size": "minibatch"},
        {"use_rms_prop": "rms_prop"}, "SB3's A2C: one gradient step per rollout, Adam",
        fixed=("trainer.epochs_per_batch=1",)),
    # off-policy
    Row(OFF, "lr", "lr", {"optim.lr": "lr", "optim.lr_schedule": "lr_schedule"},
        {"learning_rate": "lr_spec"}),
    Row(OFF, "replay buffer", "buffer", {"buffer.capacity": "buffer"}, {"buffer_size": "buffer"},
        fixed=("buffer.name=replay", "buffer.sampler=uniform")),
    Row(OFF, "batch", "batch", {"buffer.batch_size": "batch"}, {"batch_size": "batch"}),
    Row(OFF, "random warm-up frames", "learning_starts",
        {"collector.init_random_frames": "learning_starts", "trainer.learning_starts": "first_update"},
        {"learning_starts": "learning_starts"},
        "SB3 first trains once num_timesteps > learning_starts (the batch after the warm-up)"),
    Row(OFF, "frames per batch, updates per batch", ("n_steps", "updates"),
        {"collector.frames_per_batch": "n_steps", "trainer.updates_per_frame": "updates_per_frame"},
        {"train_freq": "n_steps", "gradient_steps": "updates", "env.n_envs": "n_envs"},
        fixed=("env.num_envs=1",)),
    Row(("dqn",), "target copy every (frames, between batches)", "target_interval_frames",
        {"+hooks.target_update.interval_frames": "target_interval_frames"},
        {"target_update_interval": "target_interval_frames", "tau": "hard_tau"},
        "both count env frames and copy before a batch's updates (SB3: in its collection callback)",
        fixed=("loss.tau=1.0", "hooks.target_update.interval_updates=null")),
    Row(("dqn",), "epsilon init -> end over frames after warm-up", ("eps_init", "eps_end", "eps_frames"),
        {"exploration.eps_init": "eps_after_warmup", "exploration.eps_end": "eps_end",
         "exploration.annealing_frames": "eps_frames"},
        {"exploration_initial_eps": "eps_init", "exploration_final_eps": "eps_end",
         "exploration_fraction": "eps_fraction"},
        "one line on both sides: SB3's starts at frame 0, rlrun's at the warm-up's end at SB3's value there"),
    Row(("dqn",), "max grad norm", "max_grad_norm", {"optim.max_grad_norm": "max_grad_norm"},
        {"max_grad_norm": "max_grad_norm"}),
    Row(("dqn",), "loss, target", "loss_target", {"loss.double": "double"}, {},
        "SB3: smooth L1 on max_a Q_target (no double-Q)", fixed=("loss.loss=huber",)),
    Row(CONT, "polyak tau", "tau", {"loss.tau": "tau"}, {"tau": "tau"},
        fixed=("hooks.target_update.interval_updates=1",)),
    Row(("sac", "td3"), "critics", "num_q", {"model.num_q": "num_q"}, {"policy_kwargs.n_critics": "num_q"}),
    Row(("ddpg",), "critics", "num_q", {"model.num_q": "num_q"}, {}, "SB3's DDPG: one critic"),
    Row(("sac",), "temperature: learned, initial, target entropy", "init_alpha",
        {"loss.init_alpha": "init_alpha"},
        {"ent_coef": "auto_alpha", "target_entropy": "auto"}, "target -|A| on both",
        fixed=("loss.learn_alpha=true", "loss.target_entropy=null")),
    Row(("td3",), "exploration N(0, sigma)", "noise", {"exploration.sigma": "noise"},
        {"action_noise": "normal_noise"}, fixed=("exploration.eps_init=1.0", "exploration.eps_end=1.0")),
    Row(("td3",), "policy delay, target noise, clip", ("policy_delay", "target_noise", "noise_clip"),
        {"loss.policy_delay": "policy_delay", "loss.target_noise": "target_noise",
         "loss.noise_clip": "noise_clip"},
        {"policy_delay": "policy_delay", "target_policy_noise": "target_noise",
         "target_noise_clip": "noise_clip"}),
    Row(("ddpg",), "OU noise sigma, theta, dt (fixed scale)", ("ou_sigma", "ou_theta", "dt"),
        {"exploration.sigma": "ou_sigma", "exploration.theta": "ou_theta", "exploration.dt": "dt"},
        {"action_noise": "ou_noise"}, "see DIFFERENCES",
        fixed=("exploration.eps_init=1.0", "exploration.eps_end=1.0")),
]
# fmt: on


def _hydra(value: Any) -> str:
    """A value as a Hydra override spells it."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ",".join(str(x) for x in value) + "]"
    return str(value)


def values(task: Task) -> dict[str, Any]:
    """``task``'s values and those derived from them (a peer's form of a setting, rlrun's units)."""
    v: dict[str, Any] = {
        "n_envs": 1,
        "lr_schedule": "constant",
        "obs_norm": False,
        "separate": True,
        "log_std_init": 0.0,
        "rms_prop": False,
        "hard_tau": 1.0,
        "auto": "auto",
        "dt": 1.0,
        **task.values,
    }
    on_policy = task.algo in ON
    v.update(
        frames=task.frames,
        net_arch=dict(pi=v["net"], vf=v["net"]) if on_policy else v["net"],
        optimizer=("adam", v["adam_eps"]),
        lr_spec=(v["lr_schedule"], v["lr"]),
        batch_frames=v["n_steps"] * v["n_envs"],
        num_q=1 if task.algo == "ddpg" else 2,
    )
    if on_policy:
        v["vf_coef"] = v["critic_coef"] / 2  # rlrun's value loss has a 0.5 in it, SB3's not
    else:
        v["first_update"] = v["learning_starts"] + 1  # SB3 trains once num_timesteps > learning_starts
        v["updates_per_frame"] = v["updates"] / v["n_steps"]
    if task.algo == "dqn":
        v["eps_fraction"] = (v["learning_starts"] + v["eps_frames"]) / task.frames
        # SB3 anneals from frame 0, through the warm-up (whose actions are uniform anyway); rlrun from
        # the warm-up's end: started there at SB3's epsilon of that frame, the two lines coincide
        # (issue 43: without it rlrun explored more for 10k frames, and its AUC was "different")
        v["eps_after_warmup"] = round(v["eps_init"] - (v["eps_init"] - v["eps_end"]) * v["learning_starts"]
                                      / (v["learning_starts"] + v["eps_frames"]), 6)
        v["loss_target"] = ("huber", "double" if v["double"] else "max")
    v["auto_alpha"] = f"auto_{v.get('init_alpha')}"
    v["normal_noise"] = ("normal", v.get("noise"))
    v["ou_noise"] = ("ou", v.get("ou_sigma"), v.get("ou_theta"), v["dt"])
    return v


def mapping(task: Task) -> list[Setting]:
    """Every setting of ``task`` on both sides (rows in the order the README table prints them)."""
    v = values(task)
    return [row.setting(v) for row in ROWS if task.algo in row.algos]


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
    # both train after each batch that ends past the warm-up (SB3: num_timesteps > learning_starts)
    return (frames // batch - warmup(task, frames) // batch) * v["updates"]


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
