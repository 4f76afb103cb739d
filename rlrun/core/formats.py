"""Format versions of the files rlrun saves, and the migrations between them (issue 40 §4).

Every saved kind has a current version; a file says which version wrote it. Reading one:
a newer version than this rlrun knows is refused with one line (upgrade rlrun); an older one is
brought forward through ``MIGRATIONS`` one step at a time; a version with no migration is one
line naming the file and what to do. A change to a saved format bumps ``CURRENT`` and adds a
migration (tests/core/test_formats.py fails otherwise).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlrun.core.errors import CheckpointError

# kind -> (the key holding its version, the version this rlrun writes)
CURRENT: dict[str, tuple[str, int]] = {
    # 2: the policy is its own component, exploration saved apart; 3: the policy saved apart under
    # "policy", and MAPPO/IPPO's loss no longer holds PPO's loss inside it (its "ppo.*" keys)
    "checkpoint": ("format_version", 3),
    "policy": ("policy_format", 1),
    # 1: summary.json says its format (before: none, read as 0)
    "summary": ("format_version", 1),
    # 1: a dataset's metadata.json says its format in rlrun's receipts (minari's own keys untouched)
    "dataset": ("rlrun.format_version", 1),
}
# Kinds whose files were written before they held a version: a file without one is this version.
UNVERSIONED: dict[str, int] = {"summary": 0, "dataset": 0}

Migration = Callable[[dict[str, Any]], dict[str, Any]]


def _checkpoint_2_to_3(state: dict[str, Any]) -> dict[str, Any]:
    """Format 2 -> 3. Before 3 a checkpoint held the policy's weights only inside the loss (keys
    ``policy.*``; ``rlrun.load`` reads them under ``"policy"`` now), and MAPPO/IPPO's loss (the MARL
    PPO loss, before PPO's own loss read agent groups) held PPO's loss as a child: the same
    networks again under ``ppo.*``, which the loss of today does not have."""
    loss = state.get("loss")
    if isinstance(loss, dict):
        twins = [k for k in loss if isinstance(k, str) and k.startswith("ppo.")]
        if twins and all(f"policy.{k[4:]}" in loss for k in twins):
            loss = {k: v for k, v in loss.items() if k not in twins}
            state["loss"] = loss
        if state.get("policy") is None:
            state["policy"] = {k[len("policy."):]: v for k, v in loss.items()
                               if isinstance(k, str) and k.startswith("policy.")}
    return state


# (kind, from version) -> the state at from version + 1. Checkpoints of format 1 (before the policy
# was its own component) held the policy's weights only inside the loss, under keys rlrun can no
# longer map for every family; they are refused with the fix to resume them with the rlrun that
# wrote them, so no entry for ("checkpoint", 1).
MIGRATIONS: dict[tuple[str, int], Migration] = {
    ("checkpoint", 2): _checkpoint_2_to_3,
    ("summary", 0): lambda state: state,  # 0 -> 1 added the version field only
    ("dataset", 0): lambda state: state,
}


# Keys a run config gained after rlrun first saved one, each with the value that does what the rlrun
# before it did: an older run's config is read as if it held them, so resuming it with the same
# command compares equal. (kind of env, or "" for any) -> {dotted key: value}.
CONFIG_ADDED: dict[str, dict[str, Any]] = {
    "": {"dataset": None, "dataset_root": None, "compile": False, "total_updates": None,
         "eval.interval_updates": None, "checkpoint.interval_updates": None, "checkpoint.keep_best": False,
         "checkpoint.keep_last": 1},
    "gym": {"env.imports": [], "env.make_kwargs": {}, "env.reward_clip": None, "env.reward_scale": 1.0},
}


def upgrade_config(node: Any) -> Any:
    """A saved run config (a plain mapping) in today's spelling: keys added since (``CONFIG_ADDED``)
    and components renamed since. Anything else is returned as it is (the schema check says why)."""
    if not isinstance(node, dict):
        return node
    node = _copy(node)
    env = node.get("env")
    env_name = env.get("name") if isinstance(env, dict) else None
    added = {**CONFIG_ADDED[""], **(CONFIG_ADDED.get(env_name, {}) if isinstance(env_name, str) else {})}
    for dotted, value in added.items():
        *parents, leaf = dotted.split(".")
        parent = node
        for p in parents:
            parent = parent.get(p) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and leaf not in parent:
            parent[leaf] = _copy(value)
    loss, hooks = node.get("loss"), node.get("hooks")
    if isinstance(loss, dict) and loss.get("name") == "marl_ppo":
        # MAPPO/IPPO's own loss became PPO's loss reading agent groups (its value loss: 0.5 * l2)
        loss["name"] = "ppo"
        loss.setdefault("critic_loss", "l2")
    gae = hooks.get("gae") if isinstance(hooks, dict) else None
    if isinstance(gae, dict) and gae.get("name") == "multiagent_gae":
        gae["name"] = "gae"  # one GAE hook: over agent groups with group: agents
        gae.setdefault("group", "agents")
    return node


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return [_copy(v) for v in value] if isinstance(value, list) else value


class FormatError(CheckpointError):
    """A saved file of a format this rlrun cannot read."""


def version_of(kind: str, state: Any) -> int | None:
    """The version ``state`` says it has (its field may be dotted: ``rlrun.format_version``);
    ``UNVERSIONED[kind]`` where a file of a kind that once had no version holds none; else None."""
    *parents, leaf = CURRENT[kind][0].split(".")
    for p in parents:
        state = state.get(p) if isinstance(state, dict) else None
    if not isinstance(state, dict):
        return None
    if leaf not in state and kind in UNVERSIONED:
        return UNVERSIONED[kind]
    v = state.get(leaf)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def stamp(kind: str, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with the version of ``kind`` this rlrun writes set in its field (in place)."""
    *parents, leaf = CURRENT[kind][0].split(".")
    node = state
    for p in parents:  # copied: the caller's nested mappings are left as they were
        node[p] = dict(node[p]) if isinstance(node.get(p), dict) else {}
        node = node[p]
    node[leaf] = CURRENT[kind][1]
    return state


def upgrade(kind: str, state: dict[str, Any], source: str | Path, key: str = "path") -> dict[str, Any]:
    """``state`` brought to the current version of ``kind``; refuses newer or unknown versions."""
    field, current = CURRENT[kind]
    version = version_of(kind, state)
    if version is None:
        raise FormatError(f"{source}: {field} is missing or not an integer; it is not an rlrun {kind} file",
                          key=key, fix=f"give a {kind} file written by rlrun")
    if version > current:
        raise FormatError(f"{source} was written by a newer rlrun ({kind} format {version}; this rlrun "
                          f"reads up to {current})", key=key,
                          fix="upgrade rlrun (pip install -U rlrun) to read it")
    while version < current:
        step = MIGRATIONS.get((kind, version))
        if step is None:
            raise FormatError(f"{source} is a {kind} of format {version}, which this rlrun cannot bring "
                              f"forward to {current}", key=key,
                              fix="resume or load it with the rlrun that wrote it, or start afresh")
        state = step(dict(state))
        version += 1
    return stamp(kind, state) if version_of(kind, state) != current else state
