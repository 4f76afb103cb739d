"""The documentation site builds with ``mkdocs build --strict``: no broken link, anchor or include."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="MkDocs is not installed: pip install -e '.[docs]'")
    pytest.importorskip("material", reason="MkDocs Material is not installed: pip install -e '.[docs]'")
    argv = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
            "-d", str(tmp_path / "site")]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-5000:]
    site = tmp_path / "site"
    for page in ("index.html", "guide/train/index.html", "reference/components/loss/index.html",
                 "papers/table1/index.html", "benchmarks/index.html"):
        assert (site / page).is_file(), page
    # the benchmarks page includes rlrun/benchmarks/README.md rather than a copy of it
    assert "Reading the numbers" in (site / "benchmarks/index.html").read_text()
    # the fidelity benchmark's page (issue 43) is on the site, curves and all, linked from its page
    fidelity = (site / "benchmarks/fidelity.html").read_text()
    assert "dqn_cartpole_tuned" in fidelity and "data:image/png;base64," in fidelity
    assert 'href="fidelity.html"' in (site / "benchmarks/index.html").read_text()
