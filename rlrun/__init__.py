"""rlrun: a declarative experiment runner for reinforcement learning on PyTorch."""

__version__ = "0.1.0"
