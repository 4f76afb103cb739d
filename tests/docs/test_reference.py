"""The generated reference (``python -m rlrun.cli.reference``) is committed fresh and complete."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlrun.cli import reference
from rlrun.core import errors
from rlrun.core.registry import KINDS, entries
from rlrun.lifecycle.compose import config_groups

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def fresh() -> dict[str, str]:
    return reference.pages()


def test_the_committed_reference_is_a_fresh_generation(fresh, tmp_path):
    committed = {str(p.relative_to(DOCS)): p.read_text() for p in
                 [*(DOCS / "reference").rglob("*.md"), *(DOCS / "_snippets").glob("paper-*.md")]}
    stale = sorted(k for k in {*fresh, *committed} if fresh.get(k) != committed.get(k))
    assert not stale, f"docs/ differs from a fresh generation in {stale}: run python -m rlrun.cli.reference"
    reference.write(tmp_path)  # and the writer writes exactly those pages
    written = {str(p.relative_to(tmp_path)): p.read_text() for p in tmp_path.rglob("*.md")}
    assert written == fresh


def _headings(text: str) -> list[str]:
    return re.findall(r"^## (.+)$", text, re.M)


def test_every_registered_component_has_its_options_documented(fresh):
    documented = {kind: _headings(fresh[f"reference/components/{kind}.md"]) for kind in KINDS}
    registered = {kind: [e.name for e in entries(kind)] for kind in KINDS}
    assert documented == registered
    assert sum(map(len, registered.values())) >= 50
    sac = fresh["reference/components/loss.md"].split("## sac\n", 1)[1].split("\n## ", 1)[0]
    # type, range, default and the docstring's line, from SACLoss's signature and Args:
    assert "| `tau` | float | &gt; 0 and &lt;= 1 | `0.005` | Polyak rate of the target critic" in sac


def test_every_preset_is_documented_with_what_it_sets(fresh):
    groups = config_groups()
    for group, options in groups.items():
        assert _headings(fresh[f"reference/presets/{group.replace('/', '-')}.md"]) == options, group
    assert sum(map(len, groups.values())) >= 140
    algo_sac = fresh["reference/presets/algo.md"].split("## sac\n", 1)[1].split("\n## ", 1)[0]
    assert "[`/loss: sac`](loss.md#sac)" in algo_sac
    assert "| `collector.init_random_frames` | `10000` |" in algo_sac


def test_every_metric_name_in_the_code_is_in_the_metrics_page():
    names = [n for n, _ in reference.METRICS]
    patterns = [re.compile("^" + re.escape(n).replace("<group>", ".+").replace("<key>", ".+")
                           .replace("<term>", ".+") + "$") for n in names]
    literal = re.compile(r"[\"'f]{1,2}((?:train|eval|time|collector|loss)/[\w{}]+)[\"']")
    found = set()
    for path in (ROOT / "rlrun").rglob("*.py"):
        if "benchmarks" in path.parts:  # benchmark table labels, not logged metrics
            continue
        found |= {re.sub(r"\{\w+\}", "x", m) for m in literal.findall(path.read_text())}
    assert {"eval/episode_return", "time/fps", "eval/best_return"} <= found
    missing = sorted(n for n in found if not any(p.match(n) for p in patterns))
    assert not missing, f"metrics logged but not in rlrun.cli.reference.METRICS: {missing}"


def test_every_exit_code_is_in_the_exit_codes_page():
    codes = {c for c, _ in reference.EXIT_CODES}
    classes = [getattr(errors, n) for n in dir(errors) if isinstance(getattr(errors, n), type)
               and issubclass(getattr(errors, n), errors.RlrunError)]
    assert {c.exit_code for c in classes} | {0, 1, 3, 130, 143} <= codes


def test_a_cell_keeps_a_table_row_whole():
    assert reference.cell("a | b ``x|y`` <dir>") == "a \\| b <code>x&#124;y</code> &lt;dir&gt;"
    assert reference.arg_docs(reference.arg_docs) == {}


def test_what_rlrun_passes_to_factories_is_not_listed_as_an_option():
    """``SUPPLIED`` (left out of the option tables) names every keyword rlrun's own build calls pass."""
    call = re.compile(r"\bbuild\(\"(\w+)\",(.*?)\)(?:\.|$|\n|,)", re.S)
    seen: dict[str, set[str]] = {}
    for rel in ("rlrun/lifecycle/build.py", "rlrun/lifecycle/run.py", "rlrun/loggers/tracking.py"):
        for kind, args in call.findall((ROOT / rel).read_text()):
            seen.setdefault(kind, set()).update(k for k in re.findall(r"\b(\w+)=", args) if k != "key")
    assert {"model", "loss", "optim", "buffer", "collector", "hook", "logger", "exploration"} <= set(seen)
    for kind, names in seen.items():
        assert names <= reference.SUPPLIED[kind], (kind, names - reference.SUPPLIED[kind])
