"""rlrun: a declarative experiment runner for reinforcement learning on PyTorch."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["load"]

from rlrun.core.private.torch import install as _install_dynamo_lazy

_install_dynamo_lazy()  # tensordict's import would otherwise import torch._dynamo (rlrun.core.private.torch)


def __getattr__(name: str) -> Any:
    # `import rlrun` stays light: torch and the env stack load on first use of rlrun.load
    if name == "load":
        from rlrun.lifecycle.load import load

        return load
    raise AttributeError(f"module 'rlrun' has no attribute {name!r}")
