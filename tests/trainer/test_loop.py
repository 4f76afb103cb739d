"""Trainer: hook-point order, learning_starts, request_stop, metric flushing."""

from __future__ import annotations

import torch
from loop_fakes import FakeCollector, FakeLogger, FakeLoss, FakeOptimizer

from rlrun.trainer.hooks import HOOK_POINTS, Hook
from rlrun.trainer.loop import Trainer


class Recorder(Hook):
    """Records every hook point; tags batches so chaining is visible."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def process_batch(self, trainer, batch):
        self.log.append((f"{self.name}.process_batch", batch["x"][0].item()))
        return batch.set("x", batch["x"] * 10)

    def pre_steps_log(self, trainer, batch):
        self.log.append((f"{self.name}.pre_steps_log", batch["x"][0].item()))

    def pre_epoch(self, trainer, batch):
        self.log.append((f"{self.name}.pre_epoch", None))

    def process_optim_batch(self, trainer, batch):
        self.log.append((f"{self.name}.process_optim_batch", None))
        tag = batch["tag"] if "tag" in batch.keys() else torch.zeros(2, dtype=torch.long)
        return batch.clone().set("tag", tag + (1 if self.name == "h1" else 10))

    def post_loss(self, trainer, sub, losses):
        self.log.append((f"{self.name}.post_loss", sorted(losses)))

    def post_optim(self, trainer):
        self.log.append((f"{self.name}.post_optim", None))

    def post_steps(self, trainer):
        self.log.append((f"{self.name}.post_steps", None))

    def post_steps_log(self, trainer, batch):
        self.log.append((f"{self.name}.post_steps_log", None))


def expected_order(batches: int, epochs: int, steps: int, names=("h1", "h2")) -> list:
    """The order documented in rlrun/trainer/loop.py, for hooks ``names``."""
    out: list = []

    def each(point, arg=None, args=None):
        for i, n in enumerate(names):
            out.append((f"{n}.{point}", args[i] if args else arg))

    for b in range(1, batches + 1):
        out.append(("collect", b))
        each("process_batch", args=[b, b * 10])  # h1 sees the raw batch, h2 h1's output
        each("pre_steps_log", b * 100)
        for _ in range(epochs):
            each("pre_epoch")
            for _ in range(steps):
                each("process_optim_batch")
                out.append(("loss", [11, 11]))  # both process_optim_batch applied, in order
                each("post_loss", ["loss_x"])
                out.append(("optimizer.step", ["loss_x"]))
                each("post_optim")
        each("post_steps")
        each("post_steps_log")
        out.append(("logger", b * 10))
    return out


class Logs(Hook):
    def post_steps_log(self, trainer, batch):
        trainer.log({"batch": float(trainer.batches)})


def make_trainer(log, batches=2, epochs=2, steps=3, hooks=None, **kwargs):
    hooks = hooks if hooks is not None else {"h1": Recorder("h1", log), "h2": Recorder("h2", log),
                                             "logs": Logs()}
    return Trainer(FakeCollector(batches, log=log), FakeLoss(log), FakeOptimizer(log), hooks,
                   epochs_per_batch=epochs, optim_steps_per_epoch=steps,
                   logger=FakeLogger(log), **kwargs)


def test_hook_points_run_in_the_documented_order():
    log: list = []
    trainer = make_trainer(log)
    trainer.train()
    assert log == expected_order(2, 2, 3)
    assert trainer.optim_steps == 12 and trainer.batches == 2 and trainer.frames == 20


def test_hook_points_cover_every_method_of_hook():
    not_points = {"state_dict", "load_state_dict", "io", "after", "every", "reads_losses_only"}
    points = {p for p in dir(Hook) if not p.startswith("_")} - not_points
    assert points == set(HOOK_POINTS)


def test_learning_starts_skips_optimisation_until_enough_frames():
    log: list = []
    trainer = make_trainer(log, batches=3, epochs=1, steps=2, learning_starts=25)
    trainer.train()
    per_batch: list[list] = []
    for entry in log:
        if entry[0] == "collect":
            per_batch.append([])
        per_batch[-1].append(entry[0])
    no_optim = ["collect", "h1.process_batch", "h2.process_batch", "h1.pre_steps_log", "h2.pre_steps_log",
                "h1.post_steps", "h2.post_steps", "h1.post_steps_log", "h2.post_steps_log", "logger"]
    assert per_batch[:2] == [no_optim, no_optim]  # frames 10 and 20 < 25
    assert per_batch[2].count("optimizer.step") == 2 and per_batch[2].count("h1.pre_epoch") == 1
    assert trainer.optim_steps == 2


class StopAt(Hook):
    def __init__(self, batch: int, log: list):
        self.batch, self.log = batch, log

    def post_steps(self, trainer):
        if trainer.batches == self.batch:
            trainer.request_stop("enough")
            trainer.request_stop("second reason")

    def post_steps_log(self, trainer, batch):
        self.log.append(("stop.post_steps_log", trainer.batches))
        trainer.log({"b": 1.0})


def test_request_stop_ends_after_the_current_batch_with_post_steps_log():
    log: list = []
    trainer = Trainer(FakeCollector(5, log=log), FakeLoss(log), FakeOptimizer(log),
                      {"stop": StopAt(2, log)}, logger=FakeLogger(log))
    trainer.train()
    assert trainer.batches == 2 and trainer.frames == 20
    assert trainer.stop_reason == "enough" and trainer.interrupted
    assert [e for e in log if e[0] in ("collect", "stop.post_steps_log", "logger")] == [
        ("collect", 1), ("stop.post_steps_log", 1), ("logger", 10),
        ("collect", 2), ("stop.post_steps_log", 2), ("logger", 20)]


class LogsEverywhere(Hook):
    def post_loss(self, trainer, sub, losses):
        trainer.log({"step_metric": float(trainer.optim_steps), "shared": -1.0})

    def post_steps_log(self, trainer, batch):
        trainer.log({"shared": float(trainer.batches)})


class ReachGoal(Hook):
    def post_steps_log(self, trainer, batch):
        trainer.request_stop("goal", interrupted=False)
        trainer.request_stop("signal")  # a later request keeps the first reason and kind


def test_request_stop_for_a_goal_is_not_an_interruption():
    trainer = Trainer(FakeCollector(3), FakeLoss([]), FakeOptimizer([]), {"goal": ReachGoal()})
    trainer.train()
    assert trainer.batches == 1
    assert trainer.stop_reason == "goal" and not trainer.interrupted


def test_metrics_reach_the_logger_once_per_batch_stamped_with_frames_and_updates():
    logger = FakeLogger()
    trainer = Trainer(FakeCollector(3), FakeLoss([]), FakeOptimizer([]), {"m": LogsEverywhere()},
                      epochs_per_batch=1, optim_steps_per_epoch=2, logger=logger)
    trainer.train()
    assert logger.calls == [
        ({"step_metric": 1.0, "shared": 1.0, "frames": 10, "updates": 2}, 10),
        ({"step_metric": 3.0, "shared": 2.0, "frames": 20, "updates": 4}, 20),
        ({"step_metric": 5.0, "shared": 3.0, "frames": 30, "updates": 6}, 30),
    ]


def test_nothing_logged_means_no_logger_call():
    logger = FakeLogger()
    Trainer(FakeCollector(2), FakeLoss([]), FakeOptimizer([]), {}, logger=logger).train()
    assert logger.calls == []


def test_base_class_points_are_not_dispatched():
    class OnlyPostOptim(Hook):
        def post_optim(self, trainer):
            pass

    trainer = Trainer(FakeCollector(1), FakeLoss([]), FakeOptimizer([]), {"a": OnlyPostOptim()})
    assert {p: len(fns) for p, fns in trainer._points.items() if fns} == {"post_optim": 1}
