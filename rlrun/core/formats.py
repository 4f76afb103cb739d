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
    "checkpoint": ("format_version", 2),  # 2: the policy is its own component, exploration saved apart
    "policy": ("policy_format", 1),
}

Migration = Callable[[dict[str, Any]], dict[str, Any]]
# (kind, from version) -> the state at from version + 1. Checkpoints of format 1 (before the policy
# was its own component) held the policy's weights only inside the loss, under keys rlrun can no
# longer map for every family; they are refused with the fix to resume them with the rlrun that
# wrote them, so no entry for ("checkpoint", 1).
MIGRATIONS: dict[tuple[str, int], Migration] = {}


class FormatError(CheckpointError):
    """A saved file of a format this rlrun cannot read."""


def version_of(kind: str, state: Any) -> int | None:
    key, _ = CURRENT[kind]
    v = state.get(key) if isinstance(state, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


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
        state[field] = version
    return state
