"""rlrun: a declarative experiment runner for reinforcement learning on PyTorch."""

__version__ = "0.1.0"

from rlrun._dynamo_lazy import install as _install_dynamo_lazy

_install_dynamo_lazy()  # tensordict's import would otherwise import torch._dynamo (~2.4 s)
