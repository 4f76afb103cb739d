"""Fakes of the loop's components for trainer and hook tests (no env, no network)."""

from __future__ import annotations

import torch
from tensordict import TensorDict


class FakeCollector:
    def __init__(self, batches: int, frames_per_batch: int = 10, log: list | None = None):
        self.batches, self.frames_per_batch, self.log = batches, frames_per_batch, log
        self.frames = 0
        self.total_frames = batches * frames_per_batch

    def __iter__(self):
        for i in range(self.batches):
            self.frames += self.frames_per_batch
            if self.log is not None:
                self.log.append(("collect", i + 1))
            yield TensorDict({"x": torch.full((2,), float(i + 1))}, batch_size=[2])

    def pop_episode_stats(self):
        return [], []


class FakeLoss:
    def __init__(self, log: list):
        self.log = log

    def __call__(self, sub):
        tag = sub.get("tag", None)
        self.log.append(("loss", None if tag is None else tag.tolist()))
        return {"loss_x": torch.tensor(1.0)}


class FakeOptimizer:
    def __init__(self, log: list):
        self.log = log
        self.last_grad_norms: dict = {}

    def step(self, losses):
        self.log.append(("optimizer.step", sorted(losses)))


class FakeLogger:
    def __init__(self, log: list | None = None):
        self.calls: list = []
        self.log = log

    def log_metrics(self, metrics, step):
        self.calls.append((dict(metrics), step))
        if self.log is not None:
            self.log.append(("logger", step))
