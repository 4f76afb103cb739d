"""The entry path points one way: ``rlrun.cli.main`` picks the command and nothing below calls back
into it; no exception class steers the control flow past ``except Exception``."""

from __future__ import annotations

import ast
from pathlib import Path

import rlrun

PACKAGE = Path(rlrun.__file__).parent
# the process entry and the benchmarks, which drive the command as a user would
CALLERS_OF_MAIN = {"__main__.py", "benchmarks"}


def _imported(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_nothing_below_the_command_imports_it():
    offenders = [path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
                 if path.relative_to(PACKAGE).parts[0] not in CALLERS_OF_MAIN
                 and path.relative_to(PACKAGE).as_posix() != "cli/main.py"
                 and "rlrun.cli.main" in _imported(ast.parse(path.read_text()))]
    assert not offenders, offenders


def test_no_exception_class_outside_exception_but_the_second_ctrl_c():
    """``StopNow`` is the interrupt itself (a second Ctrl-C); any other ``BaseException`` subclass
    would be control flow that Hydra's ``except Exception`` lets through."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    ast.unparse(b) in ("BaseException", "KeyboardInterrupt", "SystemExit", "GeneratorExit")
                    for b in node.bases):
                found.append(f"{path.relative_to(PACKAGE).as_posix()}:{node.name}")
    assert found == ["core/signals.py:StopNow"], found
