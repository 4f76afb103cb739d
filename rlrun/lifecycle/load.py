"""Use a trained policy: restore it from a run, act with it in Python, save it for a tracker.

A run directory's ``checkpoint.pt`` holds the resolved config (YAML, under
``"config"``) and, under ``"policy"``, the policy's state (networks and observation
normaliser; ``rlrun.trainer.loop.Trainer.state_dict``). ``load`` rebuilds the policy from that
config alone: no override is needed, and a run that is still training is read
without its lock (checkpoints are replaced atomically, so the file opened is
always a whole one). ``policy.pt``, written at the end of training and logged to
the tracker, holds only the config and the policy state, and loads the same way.

Actions come back in the env's own action space: rlrun's envs rescale Box
actions to [-1, 1] (and clip them) with gymnasium wrappers; ``ActionMap``
replays those wrappers' transforms, so that ``env.step(pi(obs))`` works on a
plain ``gymnasium.make(id)`` env.

Examples:
    >>> pi = rlrun.load("runs/ppo-cartpole/default")            # doctest: +SKIP
    >>> pi(obs)                                                  # doctest: +SKIP
    np.int64(1)
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from omegaconf import DictConfig, ListConfig, OmegaConf
from torch import Tensor, nn

from rlrun.core import checkpoint, formats, saved
from rlrun.core.errors import CheckpointError, ConfigError
from rlrun.core.registry import build, lookup, untrusted

CHECKPOINT, POLICY_FILE = "checkpoint.pt", "policy.pt"
POLICY_FORMAT = formats.CURRENT["policy"][1]
_MAPPING = saved.kind(dict, name="a mapping")
# The fields of a policy file, and of a run's config, that loading reads before building.
POLICY_SCHEMA = {"policy_format": (saved.integer(1), True), "frames": (saved.integer(0), True),
                 "config": (saved.kind(str, name="YAML text"), False),
                 "policy": (saved.kind(dict, name="a mapping of tensors"), True),
                 "exploration": (_MAPPING, False)}
RUN_CONFIG_SCHEMA = checkpoint.RUN_CONFIG_SCHEMA

# What a config read from a file may not make rlrun do (the README's "Files are data"): a
# ``_target_`` (or Hydra's other instantiate keys) would import and call any callable; a
# ``${...}`` would read the loader's environment (rlrun writes configs resolved, so a loaded one
# has none); ``env.imports`` and ``env.id=module:Name-v0`` import a module.
# Hydra's instantiate keys: each one makes a node call or import something.
CODE_KEYS = ("_target_", "_partial_", "_args_", "_call_", "_recursive_", "_convert_")

def resolve_device(device: str) -> torch.device:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N`` as a device this machine has (``ConfigError`` if not)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"unknown device {device!r}", key="device",
                          fix="use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("CUDA is not available here", key="device", fix="use device=cpu or auto")
    return dev


def code_paths(node: Any, prefix: str = "") -> list[tuple[str, str]]:
    """``(key, what)`` for every place in a config container that would run code or read the
    environment: instantiate keys, interpolations, env module imports."""
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if str(k) in CODE_KEYS:
                found.append((key, f"{k} {v!r}"))
            found += code_paths(v, key)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += code_paths(v, f"{prefix}[{i}]")
    elif isinstance(node, str) and "${" in node:
        found.append((prefix, f"the interpolation {node[:80]!r}"))
    if not prefix and isinstance(node, dict) and isinstance(node.get("env"), dict):
        env = node["env"]
        for i, module in enumerate(env.get("imports") or []):
            found.append((f"env.imports[{i}]", f"an import of module {module!r}"))
        env_id = env.get("id")
        if isinstance(env_id, str) and ":" in env_id:
            found.append(("env.id", f"an import of module {env_id.split(':')[0]!r}"))
    return found


def check_loaded(cfg: DictConfig | ListConfig | dict, source: str, trust_code: bool = False) -> None:
    """Refuses a config read from ``source`` that would run code, unless ``trust_code``.

    Raises:
        CheckpointError: naming the first offending key and what it would do.
    """
    raw = OmegaConf.to_container(cfg, resolve=False) if OmegaConf.is_config(cfg) else cfg
    found = code_paths(raw)
    if not found:
        return
    if trust_code:
        for key, what in found:
            print(f"[rlrun] trust_code: {source} runs {what} ({key})", file=sys.stderr, flush=True)
        return
    key, what = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    raise CheckpointError(
        f"the config saved in {source} asks for {what}{more}; rlrun builds loaded configs from "
        "registered components only", key=key,
        fix="load only files you trust with trust_code (rlrun.load(path, trust_code=True), "
        "rlrun eval PATH trust_code=true, rlrun export PATH --trust-code)")


def find_checkpoint(path: str | Path) -> Path:
    """A run directory (its ``checkpoint.pt``, else its ``policy.pt``) or a file, as a file path."""
    path = Path(path)
    if path.is_dir():
        for name in (CHECKPOINT, POLICY_FILE):
            if (path / name).is_file():
                return path / name
        hint = ""
        if (path / "config.yaml").exists():
            status = _summary_status(path)
            hint = {"diverged": " (the run diverged before its first checkpoint, so it wrote none)",
                    "failed": " (the run failed before its first checkpoint, so it wrote none)"}.get(
                status, " (the run is still before its first checkpoint: checkpoint.interval_frames)")
        raise CheckpointError(f"no {CHECKPOINT} in {path}{hint}", key="path",
                              fix="give a run directory that holds checkpoint.pt, or a checkpoint file")
    if not path.is_file():
        raise CheckpointError(f"no run directory or checkpoint at {path}", key="path",
                              fix="give a run directory (runs/<algo>-<env>/<name>) or its checkpoint.pt")
    return path


def _summary_status(run_dir: Path) -> str | None:
    try:
        return str(saved.load_summary(run_dir / "summary.json").get("status"))
    except (saved.SavedFileError, AttributeError):
        return None


def read(path: str | Path, trust_code: bool = False) -> tuple[dict[str, Any], DictConfig]:
    """The saved state (``policy``, ``exploration``, ``frames``) and the run's own config.

    The config is checked as data (``check_loaded``): one that would import or call
    code, or read the environment, is refused unless ``trust_code``.
    """
    file = find_checkpoint(path)
    fix = "give an rlrun checkpoint.pt or policy.pt (rlrun never unpickles objects from a file)"
    try:
        raw = checkpoint.load_weights_only(file, "policy" if file.name == POLICY_FILE else "checkpoint")
    except saved.SavedFileError as err:
        raise CheckpointError(err.message, key="path", fix=fix) from None
    except Exception as err:
        raise CheckpointError(
            f"cannot read {file} ({checkpoint.error_reason(err)}): rlrun expects a torch.save file of "
            "tensors, numbers, strings, lists and dicts, as rlrun writes it", key="path", fix=fix,
        ) from None
    try:
        if isinstance(raw, dict) and "policy_format" in raw:
            state = saved.check_fields(formats.upgrade("policy", raw, file), POLICY_SCHEMA, file, fix=fix)
        elif isinstance(raw, dict) and "format_version" in raw:
            raw = formats.upgrade("checkpoint", raw, file)
            saved.check_fields(raw, {**checkpoint.CHECKPOINT_SCHEMA, "frames": (saved.integer(0), True)},
                               file, fix=fix)
            if raw.get("policy") is None:  # written before the trainer saved it apart
                raise CheckpointError(f"{file} was written by an older rlrun and holds no policy of its "
                                      "own", key="path", fix=f"load {file.parent / POLICY_FILE} (written "
                                      "when the run finished), or resume the run with this rlrun to "
                                      "rewrite its checkpoint")
            state = {"policy": raw["policy"], "exploration": raw.get("exploration"),
                     "frames": int(raw["frames"]), "config": raw.get("config")}
        else:
            raise CheckpointError(f"{file} is not an rlrun checkpoint of format "
                                  f"{checkpoint.FORMAT_VERSION}", key="path",
                                  fix="give a checkpoint.pt written by this version of rlrun")
        state["frames"] = int(state["frames"])
        text, source = state.get("config"), f"{file} (its config)"
        if not text and (file.parent / "config.yaml").exists():
            source = file.parent / "config.yaml"
            text = saved.read_bytes(source, "yaml", fix=fix)
        if not text:
            raise CheckpointError(f"{file} holds no config, and there is no config.yaml beside it",
                                  key="path", fix="give the run directory that the checkpoint was written in")
        node = saved.check_fields(saved.parse_yaml(text, source, fix=fix), RUN_CONFIG_SCHEMA, source,
                                  fix=fix, what="an rlrun run config (a YAML mapping)")
        node = formats.upgrade_config(node)  # an older rlrun's spelling, read as today's
        cfg = OmegaConf.create(node)
    except saved.SavedFileError as err:
        raise CheckpointError(err.message, key="path", fix=fix) from None
    check_loaded(cfg, str(file), trust_code)
    return state, cfg


class ActionMap(nn.Module):
    """From the policy's actions to the env's: gymnasium's ``ClipAction``/``RescaleAction``, replayed.

    Built from the outermost sub-env wrapper inwards; discrete actions pass through.
    """

    def __init__(self, env: gym.Env):
        super().__init__()
        self.ops: list[str] = []
        for i, (low, high, kind) in enumerate(_action_transforms(env)):
            self.register_buffer(f"a{i}", torch.as_tensor(low))
            self.register_buffer(f"b{i}", torch.as_tensor(high))
            self.ops.append(kind)

    def forward(self, action: Tensor) -> Tensor:
        for i, kind in enumerate(self.ops):
            a, b = getattr(self, f"a{i}"), getattr(self, f"b{i}")
            # clip: a, b are the bounds; rescale: a, b are RescaleAction's intercept and gradient
            action = torch.clamp(action, a, b) if kind == "clip" else (action - a) / b
        return action


def _action_transforms(env: gym.Env) -> list[tuple[np.ndarray, np.ndarray, str]]:
    out = []
    while isinstance(env, gym.Wrapper):
        inner = env.env.action_space
        if isinstance(env, gym.wrappers.ClipAction):
            out.append((inner.low, inner.high, "clip"))
        elif isinstance(env, gym.wrappers.RescaleAction):
            # the inverse map of gymnasium.wrappers.utils.rescale_box, with its float32 coefficients
            new_min, new_max = env.action_space.low, env.action_space.high
            diff = inner.high.astype(np.longdouble) - inner.low.astype(np.longdouble)
            gradient = ((new_max - new_min) / diff).astype(inner.dtype)
            intercept = (gradient * -inner.low + new_min).astype(inner.dtype)
            out.append((intercept, gradient, "rescale"))
        env = env.env
    return out


class LoadedPolicy(nn.Module):
    """``obs -> action`` of a trained policy: numpy or torch in, the same kind out.

    Observations may be one (``observation_shape``) or a batch; the normaliser is
    part of the networks and the actions are in the env's own action space.

    Attributes:
        config: The run's resolved config.
        policy: The ``rlrun.core.policy.Policy`` (networks and normaliser).
        frames: Frames the policy was trained for.
    """

    def __init__(self, policy: nn.Module, action_map: ActionMap, config: DictConfig, spec: Any,
                 frames: int, deterministic: bool = True):
        super().__init__()
        self.policy, self.action_map, self.config, self.spec = policy, action_map, config, spec
        self.frames, self.deterministic = frames, deterministic
        self._explore = policy.behaviour(explore=True)

    @property
    def device(self) -> torch.device:
        return next(self.policy.parameters()).device

    def forward(self, obs: Tensor) -> Tensor:
        """Batched torch observations on the policy's device to env actions (what ``export`` saves)."""
        action = self.policy.act(obs) if self.deterministic else self._explore(obs)["action"]
        return self.action_map(action)

    @torch.no_grad()
    def __call__(self, obs: Any) -> Any:
        single = np.ndim(obs) == len(self.spec.observation_shape)
        as_numpy = not isinstance(obs, Tensor)
        x = torch.as_tensor(np.asarray(obs) if as_numpy else obs).to(self.device)
        action = self.forward(x[None] if single else x)
        action = action[0] if single else action
        return action.cpu().numpy() if as_numpy else action.to(obs.device)


def load(path: str | Path, device: str = "cpu", deterministic: bool = True,
         trust_code: bool = False) -> LoadedPolicy:
    """The policy of a run directory, ``checkpoint.pt`` or ``policy.pt``, ready to act.

    Args:
        path: A run directory or a file in one.
        device: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``.
        deterministic: The mode of the action distribution (else the behaviour policy's samples).
        trust_code: Accept a saved config that imports or calls code (``_target_``, ``env.imports``,
            ``module:id``, interpolations); only for files you trust. Off: such a file is refused.
    """
    state, cfg = read(path, trust_code)
    if _multi_agent(cfg.env.get("name")):
        raise ConfigError(f"{cfg.env.get('name')!r} is a multi-agent env: its policy acts on the agents' "
                          "group keys, which a loaded policy (and `rlrun export`) does not take yet",
                          key="path", fix="evaluate it with `rlrun eval RUN_DIR`")
    # the action map reads gymnasium's wrappers: a run on EnvPool loads the same env on gymnasium
    backend = {"backend": "gymnasium"} if "backend" in cfg.env else {}
    # one process for one sub-env, where the env has the choice (VMAS's batched envs do not)
    sync = {"vectorization": "sync"} if _takes("env", cfg.env.get("name"), "vectorization") else {}
    policy, env = restore(cfg, state, resolve_device(device), trust_code=trust_code, **sync, **backend)
    try:
        return LoadedPolicy(policy, ActionMap(_sub_env(env)), cfg, env.spec, state["frames"],
                            deterministic).to(resolve_device(device)).eval()
    finally:
        env.close()


def _takes(kind: str, name: Any, option: str) -> bool:
    """Whether the registered ``kind/name`` has ``option`` (False for a name it does not know)."""
    try:
        return option in inspect.signature(lookup(kind, str(name)).factory).parameters
    except (ConfigError, TypeError, ValueError):
        return False


def _multi_agent(env_name: Any) -> bool:
    try:
        return "single" not in lookup("env", str(env_name)).agent_layouts
    except ConfigError:
        return False


def restore(cfg: DictConfig, state: dict[str, Any], device: torch.device, num_envs: int = 1,
            trust_code: bool = False, **env_overrides: Any) -> tuple[nn.Module, Any]:
    """Rebuilds the env (``num_envs`` sub-envs) and the policy with its saved weights.

    The config is a loaded one (``read``): unless ``trust_code``, the registry refuses any
    ``_target_`` while building from it, whatever the caller checked before.

    Returns:
        ``(policy, env)``: the env is open; the caller closes it.
    """
    with contextlib.nullcontext() if trust_code else untrusted("the loaded config"):
        return _restore(cfg, state, device, num_envs, **env_overrides)


def _restore(cfg: DictConfig, state: dict[str, Any], device: torch.device, num_envs: int,
             **env_overrides: Any) -> tuple[nn.Module, Any]:
    node = {**OmegaConf.to_container(cfg.env, resolve=True), "num_envs": num_envs, **env_overrides}
    env = build("env", node, key="env")
    policy = build("model", cfg.model, spec=env.spec).to(device)
    if cfg.get("exploration"):
        policy.exploration = build("exploration", cfg.exploration, actor=policy.actor, spec=env.spec,
                                   num_envs=env.num_envs)
        if state.get("exploration") is not None:
            policy.exploration.load_state_dict(state["exploration"])
    try:
        policy.load_state_dict(state["policy"])
    except RuntimeError as err:
        env.close()
        raise CheckpointError(f"the saved policy does not fit its config ({str(err).splitlines()[0]})",
                              key="path", fix="give a checkpoint written by this version of rlrun") from None
    return policy, env


def _sub_env(env: Any) -> gym.Env:
    """The first sub-env (with its wrappers) of a one-sub-env sync ``GymVecEnv``."""
    return env.env.envs[0]


def write_policy_file(run_dir: Path, cfg: DictConfig, policy: nn.Module, frames: int,
                      config_text: str | None = None) -> Path:
    """Writes ``<run_dir>/policy.pt`` (config + policy state, a few hundred kB) atomically
    (``config_text``: ``cfg`` as resolved YAML, made here if not given)."""
    exploration = policy.exploration.state_dict() if policy.exploration is not None else None
    if config_text is None:
        config_text = OmegaConf.to_yaml(cfg, resolve=True)
    state = {"policy_format": POLICY_FORMAT, "config": config_text,
             "policy": {k: v.detach().cpu() for k, v in policy.state_dict().items()},
             "exploration": exploration, "frames": int(frames)}
    return checkpoint.atomic_write(Path(run_dir) / POLICY_FILE, lambda f: torch.save(state, f))
