"""A static index of rlrun's built-in components, so that ``rlrun list`` and composing a config
need no torch.

Listing the registry imports every component module (torch, tensordict, gymnasium: seconds).
``component_index.json`` holds one row ``[kind, name, summary, defaults]`` per rlrun component:
``defaults`` are its factory's keyword defaults, the one home of each option's default value.
``rlrun list`` reads the summaries (importing the registry only when third-party packages register
components through entry points); composing reads the defaults (``signature_nodes``: the nodes a
preset's ``defaults: [/signature/<kind>/<name>@_here_]`` starts from, so the composed config shows
every option). ``tests/core/test_registry.py`` checks that the index matches the live registry;
regenerate it with ``python -m rlrun.core.component_index``.
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from typing import Any

INDEX = "component_index.json"


def live(builtin_only: bool = False) -> list[tuple[str, str, str, dict[str, Any]]]:
    """``(kind, name, summary, defaults)`` of every registered component (imports them all).

    Args:
        builtin_only: Only those defined in rlrun's own modules (what the index holds).
    """
    from rlrun.core.registry import entries

    return [(e.kind, e.name, e.summary, keyword_defaults(e.factory)) for e in entries()
            if not builtin_only or getattr(e.factory, "__module__", "").startswith("rlrun.")]


def keyword_defaults(factory: Any) -> dict[str, Any]:
    """The options of ``factory`` a config sets, with their defaults, as JSON values (tuples as lists).

    Left out: options without a default (a preset must set them, or rlrun passes objects in) and
    those rlrun supplies from the top level (``registry.SUPPLIED_FIX``: gamma, seed, device, ...).
    """
    import inspect

    from rlrun.core.registry import SUPPLIED_FIX

    out = {}
    for name, p in inspect.signature(factory).parameters.items():
        if (p.default is p.empty or name in SUPPLIED_FIX
                or p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)):
            continue
        try:  # a default JSON cannot hold (an object) is the factory's alone: no config value states it
            out[name] = json.loads(json.dumps(p.default))
        except (TypeError, ValueError):
            continue
    return out


def _rows() -> list[list[Any]]:
    return json.loads(files("rlrun.core").joinpath(INDEX).read_text())


def summaries(kind: str | None = None) -> list[tuple[str, str, str]]:
    """``(kind, name, summary)`` in registry order: from the index, or live with plug-ins."""
    from importlib.metadata import entry_points

    from rlrun.core.registry import ENTRY_POINT_GROUP

    path = files("rlrun.core").joinpath(INDEX)
    if entry_points(group=ENTRY_POINT_GROUP) or not path.is_file():
        rows = live()
    else:
        rows = _rows()
    return [(r[0], r[1], r[2]) for r in rows if kind in (None, r[0])]


def signature_nodes() -> dict[tuple[str, str], dict[str, Any]]:
    """``(kind, name) -> {name: ..., **keyword_defaults}`` of rlrun's components, from the index
    (no import of any factory: composing stays torch-free)."""
    return {(kind, name): {"name": name, **defaults} for kind, name, _, defaults in _rows()}


def write(path: Path | None = None) -> Path:
    """Writes the index of the live registry next to this module (or to ``path``)."""
    path = path or Path(__file__).with_name(INDEX)
    path.write_text("[\n" + ",\n".join(json.dumps(list(row)) for row in live(builtin_only=True)) + "\n]\n")
    return path


if __name__ == "__main__":
    print(f"wrote {write()}")
