"""A static index of rlrun's built-in components, so that ``rlrun list`` needs no torch.

Listing the registry imports every component module (torch, tensordict, gymnasium:
seconds). ``component_index.json`` holds ``kind/name -> summary`` for rlrun's own
components; ``rlrun list`` reads it and imports the registry only when third-party
packages register components through entry points. ``tests/core/test_registry.py`` checks
that the index matches the live registry; regenerate it with
``python -m rlrun.core.component_index``.
"""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from importlib.resources import files
from pathlib import Path

INDEX = "component_index.json"


def live(builtin_only: bool = False) -> list[tuple[str, str, str]]:
    """``(kind, name, summary)`` of every registered component (imports them all).

    Args:
        builtin_only: Only those defined in rlrun's own modules (what the index holds).
    """
    from rlrun.core.registry import entries

    return [(e.kind, e.name, e.summary) for e in entries()
            if not builtin_only or getattr(e.factory, "__module__", "").startswith("rlrun.")]


def summaries(kind: str | None = None) -> list[tuple[str, str, str]]:
    """``(kind, name, summary)`` in registry order: from the index, or live with plug-ins."""
    from rlrun.core.registry import ENTRY_POINT_GROUP

    path = files("rlrun.core").joinpath(INDEX)
    if entry_points(group=ENTRY_POINT_GROUP) or not path.is_file():
        rows = live()
    else:
        rows = [tuple(r) for r in json.loads(path.read_text())]
    return [r for r in rows if kind in (None, r[0])]


def write(path: Path | None = None) -> Path:
    """Writes the index of the live registry next to this module (or to ``path``)."""
    path = path or Path(__file__).with_name(INDEX)
    path.write_text("[\n" + ",\n".join(json.dumps(row) for row in live(builtin_only=True)) + "\n]\n")
    return path


if __name__ == "__main__":
    print(f"wrote {write()}")
