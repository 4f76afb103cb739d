"""compile=auto: compiles once the timed warm-up projects a saving over the budget above its cost."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rlrun.trainer import compile_auto
from rlrun.trainer.compile_auto import CompileAuto, decide, projected_saving
from rlrun.trainer.loop import Budget
from tests.helpers.cli_utils import run_cli


def test_the_rule_weighs_the_saving_over_the_budget_against_the_compile():
    # SAC Pendulum's 19,000 updates: at 10 ms eager the projected saving (43.8 s) does not repay a
    # 45 s compile, at 20 ms it does; a short run never compiles
    assert projected_saving(0.010, 19_000) == pytest.approx(0.010 * (1 - 1 / 1.3) * 19_000)
    go, line = decide(0.010, 19_000)
    assert not go and "staying eager" in line and "19,000 updates left at 10.00 ms" in line
    go, line = decide(0.020, 19_000)
    assert go and line.startswith("[rlrun] compile=auto: compiling:") and "> compile ~45 s" in line
    assert not decide(1.0, 10)[0]
    assert decide(0.010, 19_000, compile_s=5.0)[0]


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _batches(hook: CompileAuto, trainer, clock: _Clock, n: int, updates: int, seconds_per_update: float,
             frames: int = 200) -> None:
    """``n`` collected batches of ``frames``, each with ``updates`` updates of the given duration."""
    for _ in range(n):
        trainer.clock += frames
        hook.pre_epoch(trainer, None)
        trainer.optim_steps += updates
        clock.now += updates * seconds_per_update
        hook.post_steps(trainer)
        trainer.last_clock = trainer.clock


def _trainer(total: int = 20_000) -> SimpleNamespace:
    trainer = SimpleNamespace(optim_steps=0, clock=1000, last_clock=1000, budget=Budget("frames", total),
                              compiled=None)
    trainer.use_compiled = lambda compiled: setattr(trainer, "compiled", compiled)  # Trainer's, as it does
    return trainer


def test_the_hook_skips_the_first_batch_times_the_next_and_decides_once(monkeypatch):
    clock, built, said = _Clock(), [], []
    monkeypatch.setattr(compile_auto.time, "perf_counter", clock)
    hook = CompileAuto(lambda: built.append(1) or "compiled", warmup_updates=300, say=said.append)
    trainer = _trainer()
    _batches(hook, trainer, clock, 1, 200, 1.0)  # a slow first batch: not timed
    _batches(hook, trainer, clock, 1, 200, 0.020)
    assert not said  # 200 timed updates < 300
    _batches(hook, trainer, clock, 1, 200, 0.020)
    # 400 timed at 20 ms; 20,000 - 1,600 frames left at one update a frame
    assert said == [decide(0.020, 18_400)[1]] and built == [1] and trainer.compiled == "compiled"
    _batches(hook, trainer, clock, 5, 200, 0.020)
    assert len(said) == 1 and built == [1]


def test_the_hook_stays_eager_where_it_does_not_pay(monkeypatch):
    clock, said = _Clock(), []
    monkeypatch.setattr(compile_auto.time, "perf_counter", clock)
    hook = CompileAuto(lambda: pytest.fail("compiled"), warmup_updates=50, say=said.append)
    trainer = _trainer(total=3000)
    _batches(hook, trainer, clock, 3, 200, 0.010)
    assert len(said) == 1 and "staying eager" in said[0] and trainer.compiled is None
    # an update budget counts its own updates left
    trainer = SimpleNamespace(optim_steps=0, clock=0, last_clock=0, budget=Budget("updates", 1_000_000))
    assert CompileAuto._updates_left(trainer, 10) == 1_000_000


@pytest.mark.parametrize("pays", [False, True])
def test_a_run_with_compile_auto_says_its_decision_and_switches_mid_run(pays, tmp_path, capsys, monkeypatch):
    """A whole run: one line; when it pays (the compile's cost set to 0), the trainer switches to
    compile=true's update mid-run (torch.compile stood in by the function itself) and finishes."""
    monkeypatch.setattr(compile_auto, "COMPILE_S", 0.0 if pays else 1e9)
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    built = []
    original = CompileAuto.__init__

    def init(self, build, *args, **kwargs):
        original(self, lambda: built.append(build()) or built[-1], *args, **kwargs)
    monkeypatch.setattr(CompileAuto, "__init__", init)
    code, _, err = run_cli(["algo=ppo", "env=cartpole", "total_frames=2048", "collector.frames_per_batch=256",
                            "compile=auto", "logger=none", "progress=false", "eval.interval_frames=0",
                            "eval.episodes=1", f"hydra.run.dir={tmp_path}"], tmp_path, capsys)
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if "compile=auto" in ln]
    assert len(lines) == 1 and ("compiling" if pays else "staying eager") in lines[0], err
    assert len(built) == (1 if pays else 0)
    if pays:
        assert type(built[0]).__name__ == "CompiledUpdate" and not built[0].fallbacks
    assert (tmp_path / "summary.json").exists()
