"""A small AST mutation run over the wiring and trust modules (issue 45.3); not a test module.

    python tests/mutation/run_mutants.py [--per-file 25] [--seed 0] [--only build] [--timeout 120]

For each target file it lists every mutation point (a comparison flipped, ``and``/``or`` swapped,
a ``not`` removed, a constant changed, a statement replaced by ``pass``), samples ``--per-file``
of them with a fixed seed, and for each writes the mutant into a copy of the tree and runs that
file's focused tests there (``nice``, ``timeout``, ``-x``): a failing or timed-out run kills it.
The checkout itself is never written. Prints one line per mutant and a score per file; survivors
are listed with file:line and the change, for the verdicts in tests/MUTANTS.md.
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# target -> (file, the focused tests run against each of its mutants)
TARGETS = {
    "build": ("rlrun/lifecycle/build.py", ["tests/lifecycle/test_config_wiring.py",
                                           "tests/lifecycle/test_build.py"]),
    "load": ("rlrun/lifecycle/load.py", ["tests/cli/test_trust_guards.py"]),
    "registry": ("rlrun/core/registry.py", ["tests/core/test_registry.py", "tests/core/test_untrusted.py",
                                            "tests/core/test_protocol_refusal.py"]),
    "journal": ("rlrun/loggers/journal.py", ["tests/loggers/test_journal.py",
                                             "tests/lifecycle/test_tracking.py", "-k", "journal"]),
}
STATEMENTS = (ast.Expr, ast.Assign, ast.AugAssign, ast.Raise, ast.Return, ast.If, ast.With)
FLIP = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE,
        ast.LtE: ast.Gt, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}


def _docstring(node: ast.AST, parent: ast.AST | None) -> bool:
    return (isinstance(parent, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and parent.body and isinstance(parent.body[0], ast.Expr) and parent.body[0].value is node)


def points(tree: ast.Module) -> list[tuple[int, str, str]]:
    """``(node index in ast.walk order, kind, description)`` of every mutation point."""
    out = []
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    for i, node in enumerate(ast.walk(tree)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Compare):
            for j, op in enumerate(node.ops):
                if type(op) in FLIP:
                    out.append((i, f"cmp{j}", f"{line}: {type(op).__name__} -> {FLIP[type(op)].__name__}"))
        elif isinstance(node, ast.BoolOp):
            out.append((i, "boolop", f"{line}: {type(node.op).__name__} swapped"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            out.append((i, "not", f"{line}: `not` removed"))
        elif isinstance(node, ast.Constant) and not _docstring(node, parents.get(id(node))):
            if isinstance(node.value, bool):
                out.append((i, "const", f"{line}: {node.value} -> {not node.value}"))
            elif isinstance(node.value, int):
                out.append((i, "const", f"{line}: {node.value} -> {node.value + 1}"))
            elif isinstance(node.value, str) and node.value and len(node.value) < 40 \
                    and not isinstance(parents.get(id(node)), ast.JoinedStr):
                out.append((i, "const", f"{line}: {node.value!r} -> 'XX{node.value}'"))
        elif isinstance(node, STATEMENTS) \
                and not (isinstance(node, ast.Expr) and _docstring(node.value, parents.get(id(node)))):
            if isinstance(parents.get(id(node)), (ast.FunctionDef, ast.If, ast.For, ast.With, ast.Try)):
                out.append((i, "remove", f"{line}: `{ast.unparse(node).splitlines()[0][:60]}` -> pass"))
    return out


def mutate(tree: ast.Module, index: int, kind: str) -> str:
    tree = copy.deepcopy(tree)
    node = list(ast.walk(tree))[index]
    if kind.startswith("cmp"):
        j = int(kind[3:])
        node.ops[j] = FLIP[type(node.ops[j])]()
    elif kind == "boolop":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind == "not":
        node.op = ast.UAdd()  # `+x` keeps the node; for a bool, `+True == 1` is truthy like True
        node.operand = ast.Call(ast.Name("bool", ast.Load()), [node.operand], [])
    elif kind == "const":
        v = node.value
        node.value = (not v) if isinstance(v, bool) else v + 1 if isinstance(v, int) else f"XX{v}"
    elif kind == "remove":
        for parent in ast.walk(tree):
            for field in ("body", "orelse", "finalbody"):
                body = getattr(parent, field, None)
                if isinstance(body, list) and node in body:
                    body[body.index(node)] = ast.Pass()
    return ast.unparse(ast.fix_missing_locations(tree))


def run_tests(tree_dir: Path, tests: list[str], timeout: int) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree_dir), "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = ["timeout", str(timeout), "nice", "-n", "10", sys.executable, "-m", "pytest", "-q", "-x", "-n", "0",
           "-p", "no:cacheprovider", "-m", "not learning and not slow", *tests]
    proc = subprocess.run(cmd, cwd=tree_dir, env=env, capture_output=True, text=True)
    if proc.returncode == 124:
        return "timeout"
    return "survived" if proc.returncode == 0 else "killed"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-file", type=int, default=25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", action="append", choices=sorted(TARGETS))
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--point", action="append", default=[], help="FILEKEY:description prefix, to rerun one")
    ap.add_argument("--tests", nargs="+", help="run these tests instead of the file's focused selection")
    opts = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rlrun-mutants-"))
    try:
        shutil.copytree(ROOT, work / "tree", ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__",
                                                                          "mutants", "*.egg-info"))
        tree_dir = work / "tree"
        for key in opts.only or sorted(TARGETS):
            rel, tests = TARGETS[key]
            tests = opts.tests or tests
            source = (ROOT / rel).read_text()
            tree = ast.parse(source)
            found = points(tree)
            if opts.point:
                chosen = [p for p in found if any(f"{key}:{p[2]}".startswith(q) for q in opts.point)]
            else:
                chosen = random.Random(opts.seed).sample(found, min(opts.per_file, len(found)))
            (tree_dir / rel).write_text(ast.unparse(tree))  # the baseline, as unparsed, must pass
            base = run_tests(tree_dir, tests, opts.timeout * 3)
            print(f"== {rel}: {len(found)} points, {len(chosen)} sampled, baseline {base}", flush=True)
            if base != "survived":
                print("   baseline fails: fix the tests first", flush=True)
                continue
            killed, survivors = 0, []
            for index, kind, desc in sorted(chosen, key=lambda p: p[0]):
                (tree_dir / rel).write_text(mutate(tree, index, kind))
                verdict = run_tests(tree_dir, tests, opts.timeout)
                killed += verdict != "survived"
                if verdict == "survived":
                    survivors.append(desc)
                print(f"   {verdict:8s} {rel}:{desc}", flush=True)
            (tree_dir / rel).write_text(source)
            print(f"== {rel}: killed {killed}/{len(chosen)} = {100 * killed / max(1, len(chosen)):.0f}%",
                  flush=True)
            for desc in survivors:
                print(f"   SURVIVOR {rel}:{desc}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
