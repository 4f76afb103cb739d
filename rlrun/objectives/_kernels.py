"""Loads a numba kernel on first use; None where numba is not installed (callers fall back to torch)."""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable


@functools.cache
def numba_kernel(module: str, name: str) -> Callable | None:
    """``module.name`` from ``rlrun.objectives``, imported (and numba-compiled or cache-loaded) once."""
    if importlib.util.find_spec("numba") is None:
        return None
    return getattr(importlib.import_module(f"rlrun.objectives.{module}"), name)
