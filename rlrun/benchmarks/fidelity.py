"""Peer fidelity: rlrun against Stable-Baselines3 (or SBX) at identical settings, over seeds, with statistics.

``python -m rlrun.benchmarks fidelity [--tasks ...] [--seeds 10] [--peer sb3|sbx] [--peer-python PATH]``

For each task of ``rlrun.benchmarks.peers`` (its settings mapping, written once) it trains both
libraries on seeds ``0 .. N-1`` in child processes (one torch thread each, the pair's order
alternating by seed), evaluates both the same way at the same frame counts, and reports per task:

* the IQM over seeds of the final return and of the area under the evaluation curve (the
  trapezoid over frames divided by the frames it spans: a mean return over training), each with a
  95 % percentile-bootstrap interval (``rlrun.report.stats``, Agarwal et al. 2021);
* the difference rlrun - peer of those IQMs with its 95 % bootstrap interval (both sides
  resampled independently);
* an equivalence verdict by two one-sided tests (TOST) at level 0.05 and margin ``MARGIN`` of the
  task's solved-vs-random range: equivalent when the 90 % bootstrap interval of the difference
  lies inside +-margin; different when the 95 % interval excludes 0 and equivalence fails;
  inconclusive otherwise (more seeds narrow it);
* the test's power at these seeds: how often it calls the peer equivalent to itself
  (``self_equivalence``), which tells an inconclusive verdict that wants more seeds from a gap;
* both sides' training wall time (evaluation excluded), whole-process time and process CPU time
  (user + system, ``wait4``: what other jobs on a shared machine do not inflate), medians.

It writes ``fidelity.md`` (the table), ``fidelity.csv``, ``fidelity.json`` (every run, curves
included; ``--from-json`` renders one or more of them again, merged) and ``fidelity.html``: rlrun's
report page style with both libraries' IQM curves and bands on shared axes per task.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rlrun.benchmarks import peer_run, peers
from rlrun.report import stats

MARGIN = 0.10
"""Equivalence margin, a fraction of the task's solved - random return range (README: why 10 %)."""
SELF_DRAWS, SELF_RESAMPLES = 100, 1000
"""Pairs of samples ``self_equivalence`` draws (its fraction to +-5 %, one standard error) and the
bootstrap resamples of each pair's interval: a tenth of the verdicts' work (about 1 s of CPU a row
at 60 seeds) for an indicator, not a verdict."""
PEER_PYTHON_ENV = "RLRUN_PEER_PYTHON"


# ----- statistics ---------------------------------------------------------------------------------


def auc(curve: list[tuple[float, float]]) -> float:
    """Mean return over training: the trapezoid area under ``(frames, return)`` over the frames spanned."""
    x, y = (np.asarray(c, dtype=float) for c in zip(*curve))
    if len(x) == 1:
        return float(y[0])
    return float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(x)) / (x[-1] - x[0]))


def iqm_difference(
    a: list[float],
    b: list[float],
    level: float = stats.LEVEL,
    resamples: int = stats.RESAMPLES,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``IQM(a) - IQM(b)`` and its percentile-bootstrap interval, each side resampled on its own."""
    x, y = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))
    point = float(stats.iqm_axis(x) - stats.iqm_axis(y))
    diffs = _resampled_differences(x, y, resamples, np.random.default_rng(seed))
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(diffs, [tail, 100 - tail])
    return point, float(low), float(high)


def _resampled_differences(
    x: np.ndarray, y: np.ndarray, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """``resamples`` bootstrap IQM differences of samples ``x - y`` along the last axis, for any
    leading batch shape (``[..., n]`` in, ``[..., resamples]`` out); each side resampled on its own."""

    def iqms(s: np.ndarray) -> np.ndarray:
        picks = rng.integers(0, s.shape[-1], (*s.shape[:-1], resamples, s.shape[-1]))
        return stats.iqm_axis(np.take_along_axis(s[..., None, :], picks, axis=-1), axis=-1)

    return iqms(x) - iqms(y)


def verdict(a: list[float], b: list[float], margin: float, seed: int = 0) -> dict:
    """TOST at level 0.05 on the IQM difference: the 90 % interval inside +-margin means equivalent."""
    diff, low95, high95 = iqm_difference(a, b, 0.95, seed=seed)
    _, low90, high90 = iqm_difference(a, b, 0.90, seed=seed)
    if -margin < low90 and high90 < margin:
        word = "equivalent"
    elif low95 > 0 or high95 < 0:
        word = "different"
    else:
        word = "inconclusive"
    return {
        "diff": diff,
        "diff_low": low95,
        "diff_high": high95,
        "tost_low": low90,
        "tost_high": high90,
        "margin": margin,
        "verdict": word,
    }


def self_equivalence(values: list[float], margin: float, sims: int = SELF_DRAWS, seed: int = 0) -> float:
    """How often the test calls one library equivalent to itself at this many seeds: the fraction of
    ``sims`` pairs of samples, each of ``len(values)`` seeds drawn with replacement from ``values``
    (one distribution, so no difference), whose 90 % interval lies inside +-``margin``.

    The test's power when there is nothing to find. Near 1, an inconclusive verdict means the two
    libraries' results are spread apart; near 0, it says only that this metric needs more seeds
    than were run (a run that collapses anywhere between its peak and the floor makes the final
    return such a metric). An estimate: the seeds run stand in for the library's distribution.
    """
    x, n = np.asarray(values, dtype=float), len(values)
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, sims, 20):  # 20 pairs at once: ~10 MB of resamples at 60 seeds
        k = min(20, sims - start)
        diffs = _resampled_differences(rng.choice(x, (k, n)), rng.choice(x, (k, n)), SELF_RESAMPLES, rng)
        low, high = np.percentile(diffs, [5, 95], axis=1)
        hits += int(np.sum((-margin < low) & (high < margin)))
    return hits / sims


def summarise(task: peers.Task, runs: list[dict]) -> dict:
    """One table row for ``task`` from its runs (both sides, any seeds)."""
    margin = MARGIN * (task.solved_return - task.random_return)
    row: dict = {"task": task.name, "margin": margin}
    sides = {}
    for lib in ("rlrun", "peer"):
        mine = sorted((r for r in runs if r["lib"] == lib), key=lambda r: r["seed"])
        sides[lib] = mine
        row[f"{lib}_seeds"] = [r["seed"] for r in mine]
        for metric, values in (
            ("final", [r["return"] for r in mine]),
            ("auc", [auc(r["curve"]) for r in mine]),
        ):
            if not values:  # one side run alone (--sides)
                for end in ("", "_low", "_high"):
                    row[f"{lib}_{metric}{end}"] = float("nan")
                continue
            row[f"{lib}_{metric}"] = stats.iqm(values)
            row[f"{lib}_{metric}_low"], row[f"{lib}_{metric}_high"] = stats.bootstrap_iqm_ci(values)
        row[f"{lib}_train_s"] = float(np.median([r["train_s"] for r in mine])) if mine else float("nan")
        row[f"{lib}_process_s"] = float(np.median([r["process_s"] for r in mine])) if mine else float("nan")
        cpu = [r["cpu_s"] for r in mine if r.get("cpu_s") is not None]  # results before cpu_s have none
        row[f"{lib}_cpu_s"] = float(np.median(cpu)) if cpu and len(cpu) == len(mine) else float("nan")
    if len(sides["rlrun"]) >= 2 and len(sides["peer"]) >= 2:
        for metric in ("final", "auc"):
            get = (lambda r: r["return"]) if metric == "final" else (lambda r: auc(r["curve"]))
            peer_values = [get(r) for r in sides["peer"]]
            v = verdict([get(r) for r in sides["rlrun"]], peer_values, margin)
            row.update({f"{metric}_{k}": val for k, val in v.items() if k != "margin"})
            row[f"{metric}_peer_self"] = self_equivalence(peer_values, margin)
    return row


# ----- running ------------------------------------------------------------------------------------


def _child(args: list[str], cwd: str | None = None) -> tuple[subprocess.CompletedProcess, float, float]:
    """Runs ``args``: its result, wall seconds and CPU seconds (user + system of this child alone, from
    ``wait4``: a figure that other jobs on the machine do not inflate, unlike the wall time)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(args, stdout=out, stderr=err, text=True, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(args, proc.returncode, out.read(), err.read())
    return done, wall, usage.ru_utime + usage.ru_stime


def rlrun_args(task: peers.Task, seed: int, frames: int | None, run_dir: Path) -> list[str]:
    """rlrun's command-line overrides for ``task`` with every mapped setting, run in ``run_dir``."""
    budget = frames or task.frames
    args = [
        *peers.rlrun_overrides(task),
        f"seed={seed}",
        f"total_frames={budget}",
        "logger=csv",
        "progress=false",
        "threads=1",
        "resume=false",
        f"eval.interval_frames={min(task.eval_interval, budget)}",
        f"eval.episodes={peers.EVAL_EPISODES}",
        "eval.max_envs=10",
        "checkpoint.interval_frames=0",
        f"hydra.run.dir={run_dir}",
    ]
    if frames and "learning_starts" in task.values:  # a shorter budget (smoke): warm-up and epsilon
        start = peers.warmup(task, frames)
        args += [f"collector.init_random_frames={start}", f"trainer.learning_starts={start + 1}"]
        if task.algo == "dqn":  # shrink with it, as peer_run.peer_child does on the peer's side
            eps_frames = max(1, task.values["eps_frames"] * budget // task.frames)
            args.append(f"exploration.annealing_frames={eps_frames}")
    return args


def run_rlrun(task: peers.Task, seed: int, frames: int | None = None) -> dict:
    """rlrun's side: the CLI in a child process with every mapped setting; its eval curve and times."""
    with tempfile.TemporaryDirectory(prefix="rlrun-fidelity-") as tmp:
        args = [sys.executable, "-m", "rlrun.cli.main", *rlrun_args(task, seed, frames, Path(tmp) / "run")]
        proc, process_s, cpu_s = _child(args, cwd=tmp)
        if proc.returncode != 0:
            raise RuntimeError(
                f"rlrun failed ({proc.returncode}) on {task.name} seed {seed}:\n{proc.stderr[-2000:]}"
            )
        summary = json.loads((Path(tmp) / "run" / "summary.json").read_text())
        with open(Path(tmp) / "run" / "metrics.csv") as f:
            curve = [
                (int(r["step"]), float(r["value"]))
                for r in csv.DictReader(f)
                if r["key"] == "eval/episode_return"
            ]
    eval_s = summary.get("eval/time_total_s", 0.0)
    return {
        "frames": summary["frames"],
        "curve": curve,
        "return": summary["eval/episode_return"],
        "train_s": summary["wall_time_s"] - eval_s,
        "eval_s": eval_s,
        "process_s": process_s,
        "cpu_s": cpu_s,
    }


def peer_python() -> str:
    """The interpreter with the peer installed: ``RLRUN_PEER_PYTHON`` if set, else this one."""
    return os.environ.get(PEER_PYTHON_ENV) or sys.executable


def run_peer(
    lib: str, task: peers.Task, seed: int, frames: int | None = None, python: str | None = None
) -> dict:
    """The peer's side: ``peer_run.py`` run as a script by ``python`` (no rlrun install needed there)."""
    if lib == "sbx" and task.sbx is False:
        raise ValueError(f"SBX has no {task.algo.upper()}")
    args = [
        python or peer_python(),
        str(Path(peer_run.__file__)),
        lib,
        task.name,
        str(seed),
        *([str(frames)] if frames else []),
    ]
    proc, process_s, cpu_s = _child(args)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{lib} failed ({proc.returncode}) on {task.name} seed {seed}:\n{proc.stderr[-2000:]}"
        )
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "process_s": process_s, "cpu_s": cpu_s}


def run(
    tasks: list[str],
    seeds: list[int],
    lib: str = "sb3",
    frames: int | None = None,
    jobs: int = 1,
    python: str | None = None,
    log=print,
    sides: tuple[str, ...] = ("rlrun", "peer"),
) -> dict:
    """Every (task, seed, side) run, ``jobs`` at a time; the pair's order alternates by seed.

    ``sides``: one side alone reruns it after a change to it, merged later with the other side's
    earlier runs (``--from-json``; a seed's runs are deterministic on each side)."""
    work = []
    for name in tasks:
        for seed in seeds:
            pair = [(side, seed) for side in ("rlrun", "peer") if side in sides]
            work += [(name, side, s) for side, s in (pair if seed % 2 == 0 else pair[::-1])]

    def one(item: tuple[str, str, int]) -> dict:
        name, side, seed = item
        task = peers.TASKS[name]
        result = (
            run_rlrun(task, seed, frames) if side == "rlrun" else run_peer(lib, task, seed, frames, python)
        )
        row = {"task": name, "lib": side, "peer": lib, "seed": seed, "load": os.getloadavg()[0], **result}
        log(
            f"  {name} seed {seed} {side if side == 'rlrun' else lib}: final {row['return']:.1f}, "
            f"AUC {auc(row['curve']):.1f}, train {row['train_s']:.1f} s, process {row['process_s']:.1f} s, "
            f"CPU {row['cpu_s']:.1f} s, "
            f"load {row['load']:.1f}"
        )
        return row

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        runs = list(pool.map(one, work))
    return {"peer": lib, "frames": frames, "jobs": jobs, "runs": runs}


# ----- reporting ----------------------------------------------------------------------------------


def rows_of(result: dict) -> list[dict]:
    names = list(dict.fromkeys(r["task"] for r in result["runs"]))
    return [summarise(peers.TASKS[n], [r for r in result["runs"] if r["task"] == n]) for n in names]


def _seconds(value: float) -> str:
    return "-" if np.isnan(value) else f"{value:.1f}"


def _ci(row: dict, key: str) -> str:
    return f"{row[key]:.1f} [{row[key + '_low']:.1f}, {row[key + '_high']:.1f}]"


def table(result: dict) -> tuple[list[str], list[list[str]]]:
    """The table's headers and cells: per task and metric both IQMs with intervals, the difference,
    the verdict, the times, the seeds."""
    peer = result["peer"].upper()
    headers = [
        "task", "metric", "rlrun IQM [95% CI]", f"{peer} IQM [95% CI]", f"rlrun - {peer} [95% CI]",
        "90% CI (TOST)", "margin", "verdict", f"{peer} vs itself: equivalent", "rlrun train s",
        f"{peer} train s", "rlrun process s", f"{peer} process s", "rlrun CPU s", f"{peer} CPU s", "seeds",
    ]  # fmt: skip
    cells = []
    for row in rows_of(result):
        seeds = row["rlrun_seeds"]
        seed_text = f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else str(seeds)
        for metric in ("final", "auc"):
            if f"{metric}_diff" not in row:
                continue
            m = {k[len(metric) + 1 :]: v for k, v in row.items() if k.startswith(metric + "_")}
            cells.append([
                row["task"], "final return" if metric == "final" else "AUC (mean eval return)",
                _ci(row, "rlrun_" + metric), _ci(row, "peer_" + metric),
                f"{m['diff']:+.1f} [{m['diff_low']:+.1f}, {m['diff_high']:+.1f}]",
                f"[{m['tost_low']:+.1f}, {m['tost_high']:+.1f}]", f"+-{row['margin']:.1f}", m["verdict"],
                f"{m['peer_self']:.0%}",
                f"{row['rlrun_train_s']:.1f}", f"{row['peer_train_s']:.1f}", f"{row['rlrun_process_s']:.1f}",
                f"{row['peer_process_s']:.1f}", _seconds(row["rlrun_cpu_s"]), _seconds(row["peer_cpu_s"]),
                f"{seed_text} ({len(seeds)})",
            ])  # fmt: skip
    return headers, cells


def markdown(result: dict) -> str:
    """The table in Markdown (the verdict in bold)."""
    headers, cells = table(result)
    verdict_at = headers.index("verdict")
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in cells:
        lines.append(
            "| " + " | ".join(f"**{c}**" if i == verdict_at else c for i, c in enumerate(row)) + " |"
        )
    return "\n".join(lines)


def csv_text(result: dict) -> str:
    rows = rows_of(result)
    out = io.StringIO()
    keys = list(dict.fromkeys(k for r in rows for k in r))
    writer = csv.DictWriter(out, keys)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def curve_figure(task: peers.Task, runs: list[dict], peer: str) -> bytes:
    """Both libraries' IQM eval curves with 95 % bootstrap bands, shared axes (the report's ``iqm_curve``)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from rlrun.report.compare import iqm_curve

    fig = Figure(figsize=(6.4, 3.8))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    steps = sorted({s for r in runs for s, _ in r["curve"]})
    grid = np.linspace(steps[0], steps[-1], 100) if len(steps) > 1 else np.asarray(steps, dtype=float)
    for lib, label, color in (("rlrun", "rlrun", "C0"), ("peer", peer.upper(), "C1")):
        curves = [
            (np.array([s for s, _ in r["curve"]], float), np.array([v for _, v in r["curve"]], float))
            for r in runs
            if r["lib"] == lib
        ]
        if not curves:
            continue
        mid, low, high, _ = iqm_curve(curves, grid)
        ax.plot(grid, mid, color=color, label=f"{label} ({len(curves)} seeds)")
        ax.fill_between(grid, low, high, color=color, alpha=0.2)
    ax.axhline(task.solved_return, color="gray", lw=0.6, ls=":")
    ax.set_xlabel("frames")
    ax.set_ylabel("evaluation return (IQM over seeds)")
    ax.set_title(f"{task.name}: rlrun and {peer.upper()} at identical settings")
    ax.legend(loc="lower right", fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return buf.getvalue()


def html(result: dict, command: str = "") -> str:
    """The page (``rlrun.report.page``'s document): the table, the curves on shared axes, the mapping."""
    from rlrun.report.page import document, esc, figure

    headers, cells = table(result)
    body = [
        f"<h1>Peer fidelity: rlrun and {esc(result['peer'].upper())} at identical settings</h1>",
        f"<p class='meta'>{len(result['runs'])} runs; command: <code>{esc(command)}</code></p>",
        "<div class='wide'><table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>",
    ]
    for row in cells:
        tds = (f"<td>{esc(c)}</td>" if i < 2 or h == "verdict" else f"<td class='num'>{esc(c)}</td>"
               for i, (h, c) in enumerate(zip(headers, row)))  # fmt: skip
        body.append("<tr>" + "".join(tds) + "</tr>")
    body += ["</table></div>", "<h2>Learning curves</h2>"]
    for name in dict.fromkeys(r["task"] for r in result["runs"]):
        task = peers.TASKS[name]
        runs = [r for r in result["runs"] if r["task"] == name]
        body.append(
            figure(
                f"{name}: IQM over seeds with 95% bootstrap bands", curve_figure(task, runs, result["peer"])
            )
        )
        body += [
            f"<details><summary>{esc(name)}: the settings on both sides</summary><table>",
            "<tr><th>setting</th><th>value</th><th>rlrun</th><th>SB3 / SBX</th><th>note</th></tr>",
            *(
                f"<tr><td>{esc(s.name)}</td><td>{esc(s.value)}</td><td><code>{esc(' '.join(s.rlrun))}</code>"
                f"</td><td><code>{esc(', '.join(f'{k}={v}' for k, v in s.peer.items()) or '(fixed)')}</code>"
                f"</td><td>{esc(s.note)}</td></tr>"
                for s in peers.mapping(task)
            ),
            "</table><ul>" + "".join(f"<li>{esc(d)}</li>" for d in peers.DIFFERENCES.get(task.algo, [])),
            "</ul></details>",
        ]
    notes = [
        "Equivalence: two one-sided tests at level 0.05 on the IQM difference (its 90% percentile-bootstrap "
        f"interval inside +-margin); margin = {MARGIN:.0%} of the task's solved - random return range.",
        *peers.DIFFERENCES["common"],
    ]
    body.append("<h2>Notes</h2><ul class='notes'>" + "".join(f"<li>{esc(d)}</li>" for d in notes) + "</ul>")
    return document("rlrun peer fidelity", body)


def write(result: dict, out: Path, command: str = "") -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "fidelity.json": json.dumps({**result, "command": command}, indent=1),
        "fidelity.md": markdown(result) + "\n",
        "fidelity.csv": csv_text(result),
        "fidelity.html": html(result, command),
    }
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    return [out / n for n in files]


def merge(paths: list[Path]) -> dict:
    """Several ``fidelity.json`` of the same peer as one result (later files win a repeated run)."""
    results = [json.loads(p.read_text()) for p in paths]
    libs = {r["peer"] for r in results}
    if len(libs) != 1:
        raise ValueError(f"--from-json: files of different peers {sorted(libs)}")
    runs = {(r["task"], r["lib"], r["seed"]): r for res in results for r in res["runs"]}
    return {
        "peer": libs.pop(),
        "frames": results[-1].get("frames"),
        "jobs": results[-1].get("jobs"),
        "runs": list(runs.values()),
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m rlrun.benchmarks fidelity``; exit 2 with one line on bad input."""
    p = argparse.ArgumentParser(
        prog="python -m rlrun.benchmarks fidelity",
        description="rlrun against SB3/SBX at identical settings, over seeds.",
    )
    p.add_argument(
        "--tasks",
        nargs="+",
        default=list(peers.CHEAP),
        metavar="TASK",
        help=f"any of {', '.join(peers.TASKS)} (default: {' '.join(peers.CHEAP)})",
    )
    p.add_argument("--seeds", type=int, default=10, help="seeds per side (default 10)")
    p.add_argument("--seed-start", type=int, default=0, help="first seed (to add seeds to an earlier run)")
    p.add_argument("--peer", choices=peers.PEERS, default="sb3")
    p.add_argument("--peer-python", default=None, help=f"interpreter with the peer (or ${PEER_PYTHON_ENV})")
    p.add_argument(
        "--frames", type=int, default=None, help="override every budget (a smoke run, not the statistics)"
    )
    p.add_argument("--jobs", type=int, default=1, help="runs at once (wall times then share the cores)")
    p.add_argument("--sides", nargs="+", choices=("rlrun", "peer"), default=["rlrun", "peer"],
                   help="run one side alone, e.g. rlrun after a change to it; merge with --from-json")
    p.add_argument("--out", type=Path, default=Path("bench_results/fidelity"))
    p.add_argument("--from-json", nargs="+", type=Path, default=None, help="render earlier results, merged")
    args = p.parse_args(argv)
    command = "python -m rlrun.benchmarks fidelity " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.from_json:
        try:
            result = merge(args.from_json)
        except (OSError, ValueError, KeyError) as e:
            print(f"error: --from-json: {e}", file=sys.stderr)
            return 2
    else:
        unknown = [t for t in args.tasks if t not in peers.TASKS]
        if unknown:
            print(
                f"error: --tasks: unknown {', '.join(unknown)}; choose from {', '.join(peers.TASKS)}",
                file=sys.stderr,
            )
            return 2
        if args.seeds < 1 or args.jobs < 1 or (args.frames is not None and args.frames < 1):
            print("error: --seeds, --jobs and --frames must be >= 1", file=sys.stderr)
            return 2
        if args.peer == "sbx" and (no := [t for t in args.tasks if not peers.TASKS[t].sbx]):
            print(f"error: --tasks: SBX has no {', '.join(no)}; drop them for --peer sbx", file=sys.stderr)
            return 2
        seeds = list(range(args.seed_start, args.seed_start + args.seeds))
        result = run(args.tasks, seeds, args.peer, args.frames, args.jobs, args.peer_python,
                     sides=tuple(args.sides))
    print(markdown(result))
    for path in write(result, args.out, command):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
