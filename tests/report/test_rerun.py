"""The rerun command a report shows: rebuilt from what the tracker stores, it reproduces the run.

Real tiny runs (PPO on CartPole, 2048 frames, seeds 0 and 1 in one multirun) log to a fresh
MLflow store; the HTML report's command for seed 1 is run as it stands in an empty directory,
and its final eval return, frames and config hash must equal the original's (a fixed seed on
the CPU is deterministic). Bounded: three ``rlrun`` processes, about 60 s on 2 busy cores.
"""

from __future__ import annotations

import html
import os
import re
import shlex
import subprocess
import sys

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from rlrun.report.cli import main
from rlrun.report.rerun import hydra_value, rerun
from rlrun.report.runs import load_runs

TINY = ["algo=ppo", "env=cartpole", "total_frames=2048", "collector.frames_per_batch=512",
        "eval.interval_frames=1024", "eval.episodes=2", "device=cpu", "progress=false"]


def _rlrun(args: list[str], cwd) -> None:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    done = subprocess.run([sys.executable, "-m", "rlrun", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    where = tmp_path_factory.mktemp("original")
    _rlrun(["-m", *TINY, "seed=0,1"], where)
    return where


def test_the_pages_rerun_command_reproduces_a_seed(original, tmp_path):
    uri = f"sqlite:///{original / 'mlflow.db'}"
    assert main(["--tracking-uri", uri, "--format", "html", "--out", str(tmp_path / "report")]) == 0
    page = (tmp_path / "report" / "runs.html").read_text()
    assert "(composes to this run's config hash)" in page, re.findall(r"seed 0.{0,300}", page)
    commands = [html.unescape(c) for c in re.findall(r"<pre><code>(rlrun .*?)</code></pre>", page, re.S)]
    assert len(commands) == 2
    assert sorted(re.search(r" seed=(\d)", c).group(1) for c in commands) == ["0", "1"]
    (command,) = [c for c in commands if " seed=1" in c]
    args = shlex.split(command)
    assert args[:3] == ["rlrun", "algo=ppo", "env=cartpole"]
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    _rlrun(args[1:], fresh)  # exactly the page's command, in an empty directory
    before = load_runs(uri, filter_string="tags.seed = '1'").iloc[0]
    after = load_runs(f"sqlite:///{fresh / 'mlflow.db'}").iloc[0]
    assert after["frames"] == before["frames"] == 2048
    assert after["final_return"] == before["final_return"]
    assert after["tags"]["config_hash"] == before["tags"]["config_hash"]
    assert list(after["curve_values"]) == list(before["curve_values"])


def test_a_paper_preset_run_reruns_as_its_preset():
    from rlrun.lifecycle.explain import compose_config
    from rlrun.lifecycle.run import flatten

    cfg = compose_config(["+paper=table1/ppo_halfcheetah", "seed=3", "optim.lr=0.001"])
    params = {k: str(v) for k, v in flatten(OmegaConf.to_container(cfg, resolve=True)).items()}
    again = rerun(params, {"algo": "ppo", "env": "halfcheetah"})
    assert again.command == "rlrun +paper=table1/ppo_halfcheetah optim.lr=0.001 seed=3" and again.exact
    params["seed"] = "0"  # the default, still said: a reader sees which seed reruns
    assert rerun(params, {}).command == "rlrun +paper=table1/ppo_halfcheetah optim.lr=0.001 seed=0"


@pytest.mark.parametrize("value", ["a b", "it's", "x\\", "a\\'b", "${oc.env:HOME}", "true", "1", "null",
                                   "<script>alert(1)</script>", '"onload=x', "a|b\nc`d`", [1, "a b", None],
                                   {"k": "v w"}, 0.25, None, False])
def test_override_values_read_back_as_the_logged_value(value):
    # Hydra's parser, then OmegaConf's resolution (an escaped "${" stays text, never an env lookup).
    parsed = OverridesParser.create().parse_override(f"+k={hydra_value(value)}").value()
    assert OmegaConf.to_container(OmegaConf.create({"k": parsed}), resolve=True)["k"] == value
