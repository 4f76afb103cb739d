"""The package's layout: a root of a few modules, no import circles, every module importable alone."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import rlrun

PACKAGE = Path(rlrun.__file__).parent
ROOT_MODULES_MAX = 5


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        if "hydra_plugins" in parts:  # Hydra's plugin namespace package, imported by Hydra
            continue
        mods[".".join(parts)] = path
    return mods


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """Every rlrun module this one imports: at module level, inside functions (lazy imports still
    close a circle at run time) and under ``if TYPE_CHECKING`` (typing is a dependency too)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                for a in child.names:
                    found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
            visit(child)

    visit(ast.parse(path.read_text()))
    out = set()
    for name in found:
        while name and name not in known:  # `import rlrun.x.y as z` or an attribute of a module
            name = name.rpartition(".")[0]
        if name and name != module and name != "rlrun":
            out.add(name)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            strong(v)
    return out


def test_the_package_root_holds_a_few_modules():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= ROOT_MODULES_MAX, root


def test_no_module_is_longer_than_600_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 600}
    assert not long, long


def test_the_import_graph_has_no_circles():
    mods = _modules()
    graph = {m: _imports(m, p, set(mods)) for m, p in mods.items()}
    assert "rlrun.core.registry" in graph["rlrun.lifecycle.build"]  # the graph sees imports at all
    assert not _cycles(graph), _cycles(graph)


# The package layers, lowest first: a package imports only from layers below its own (lazy imports
# inside functions and TYPE_CHECKING imports included). The floor (checkpoint I/O, run dir, signals,
# config hash, limits) lives in core; a run's assembly (compose, build, load, run) in lifecycle.
LAYERS = (
    ("core",),
    ("objectives", "loggers", "envs", "buffers", "modules", "datasets", "distributed"),
    ("collectors", "trainer"),
    ("algos",),
    ("lifecycle",),
    ("launch",),
    ("report",),
    ("cli",),
    ("benchmarks",),
)


def _package_graph() -> dict[str, set[str]]:
    """rlrun's sub-packages and which others each imports (the root modules left out: they sit on top)."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for m, p in mods.items():
        parts = m.split(".")
        if len(parts) < 2 or (PACKAGE / f"{parts[1]}.py").exists():
            continue
        deps = graph.setdefault(parts[1], set())
        for d in _imports(m, p, set(mods)):
            dp = d.split(".")
            if len(dp) > 1 and dp[1] != parts[1] and not (PACKAGE / f"{dp[1]}.py").exists():
                deps.add(dp[1])
    return graph


def _upward(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...]) -> list[str]:
    rank = {pkg: i for i, layer in enumerate(layers) for pkg in layer}
    return sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps
                  if a not in rank or b not in rank or rank[b] >= rank[a])


def test_the_package_graph_has_no_circles_and_points_down():
    graph = _package_graph()
    assert "trainer" in graph["lifecycle"]  # the graph sees package imports at all
    assert set(graph) == {pkg for layer in LAYERS for pkg in layer}, "a package missing from LAYERS"
    assert not _cycles(graph), _cycles(graph)
    assert not _upward(graph, LAYERS), _upward(graph, LAYERS)


def test_the_layer_check_finds_an_upward_import():
    graph = {"core": {"trainer"}, "trainer": {"core"}, "cli": {"trainer"}}
    layers = (("core",), ("trainer",), ("cli",))
    assert _upward(graph, layers) == ["core -> trainer"]
    assert _cycles(graph) == [["core", "trainer"]]


def test_the_circle_check_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_module_imports_alone():
    """Each module imported first in a process whose rlrun modules are all unloaded: an import
    that only works after another module happened to load first fails here. (One interpreter,
    with rlrun's modules dropped between imports: a fresh interpreter per module takes minutes.)"""
    mods = sorted(m for m in _modules() if not m.endswith("__main__"))
    code = (
        "import importlib, sys, traceback\n"
        f"mods = {mods!r}\n"
        "bad = []\n"
        "for m in mods:\n"
        "    for k in [k for k in sys.modules if k == 'rlrun' or k.startswith('rlrun.')]:\n"
        "        del sys.modules[k]\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except Exception as e:\n"
        "        bad.append(f'{m}: {type(e).__name__}: {e}')\n"
        "print('\\n'.join(bad))\n"
        "sys.exit(1 if bad else 0)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
