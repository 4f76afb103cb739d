"""A trainer is assembled whole: every attribute given in its constructor, none set from outside."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rlrun
from rlrun.trainer.loop import Trainer

PACKAGE = Path(rlrun.__file__).parent


def trainer_assignments(path: Path) -> list[str]:
    """``trainer.x = ...`` (or ``+=``; or ``self.trainer.x``, ``run.trainer.x``) in one module
    (``cfg.trainer.x`` is a config section, not a trainer)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for target in targets:
            for t in (target.elts if isinstance(target, ast.Tuple) else [target]):
                if not isinstance(t, ast.Attribute):
                    continue
                owner = t.value
                if (isinstance(owner, ast.Name) and owner.id == "trainer") or (
                        isinstance(owner, ast.Attribute) and owner.attr == "trainer"
                        and isinstance(owner.value, ast.Name) and owner.value.id in ("self", "run")):
                    found.append(f"{node.lineno}: {ast.unparse(t)}")
    return found


def test_no_module_sets_a_trainer_attribute():
    """The loop's own module updates its counters; every other module passes what the trainer
    needs to its constructor (the logger, the compiled step) or asks (``request_stop``)."""
    offenders = [f"{path.relative_to(PACKAGE)}:{line}" for path in sorted(PACKAGE.rglob("*.py"))
                 if path.relative_to(PACKAGE).as_posix() != "trainer/loop.py"
                 for line in trainer_assignments(path)]
    assert not offenders, offenders


def test_the_check_sees_one(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f(trainer, run):\n    trainer.logger = 1\n    run.trainer.stop_signal = 2\n"
                      "    trainer.frames_seen += 1\n    x = trainer.logger\n    cfg.trainer.epochs = 3\n")
    assert trainer_assignments(module) == ["2: trainer.logger", "3: run.trainer.stop_signal",
                                           "4: trainer.frames_seen"]


def test_a_trainer_takes_no_attribute_after_its_constructor():
    assert "__dict__" not in dir(Trainer) and "logger" in Trainer.__slots__
    trainer = Trainer.__new__(Trainer)
    with pytest.raises(AttributeError):
        trainer.loger = None  # a misspelt late assignment fails at once
