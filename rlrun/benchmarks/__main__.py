"""``python -m rlrun.benchmarks [collection] [gae] [update] [--quick] [--compile] [--json PATH]``.

``collection --table5 --workers 1,2,4`` runs the collection benchmark in the form of
the paper's Table 5 (``table5``: gymnasium baselines, sync, multi_sync and multi_async
collectors over those worker counts).

Prints a header (machine, threads, versions) and one Markdown table per
benchmark, and writes everything, raw per-repetition times included, to JSON.

``python -m rlrun.benchmarks device --device cuda [--quick]`` is the device check
(``rlrun.benchmarks.device``): every family on the device and on CPU, tensors where they belong.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
import time
from pathlib import Path

import torch

from rlrun.benchmarks import BENCHMARKS
from rlrun.benchmarks.common import header
from rlrun.cli.main import use_huge_pages_for_large_tensors


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m rlrun.benchmarks",
        description="Benchmarks rlrun against hand-written references; every figure is a ratio "
                    "to a reference timed in the same run (interleaved repetitions, medians).")
    p.add_argument("benchmarks", nargs="*", metavar="BENCHMARK",
                   help=f"any of {', '.join(BENCHMARKS)} (default: all)")
    p.add_argument("--quick", action="store_true",
                   help="a short smoke run: fewer frames and repetitions, 1 sync env only")
    p.add_argument("--reps", type=int, default=None,
                   help="timed repetitions per case (default: per benchmark)")
    p.add_argument("--table5", action="store_true",
                   help="run `collection` as the paper's Table 5 (the table5 benchmark)")
    p.add_argument("--workers", type=_int_list, default=None, metavar="W,W,...",
                   help="worker counts of the table5 benchmark (default: 1,2)")
    p.add_argument("--compile", action="store_true",
                   help="update: also time rlrun's steps with compile=true against eager")
    p.add_argument("--json", type=Path, default=Path("bench_results/benchmarks.json"),
                   help="where to write the results (default: %(default)s, relative to cwd)")
    args = p.parse_args(argv)
    unknown = [b for b in args.benchmarks if b not in BENCHMARKS]
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    if args.reps is not None and args.reps < 1:
        p.error("--reps must be >= 1")
    if args.table5:
        args.benchmarks = [b for b in args.benchmarks if b != "collection"] + ["table5"]
    return args


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"worker counts must be >= 1, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    """Runs the selected benchmarks; returns the process exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["device"]:  # a check with its own options and exit status, not a timing table
        from rlrun.benchmarks.device import main as device_main

        return device_main(argv[1:])
    if argv[:1] == ["end_to_end"] and "--paired" in argv:  # issue 46: rlrun, SB3 and SBX paired
        from rlrun.benchmarks.end_to_end import main as end_to_end_main

        return end_to_end_main(argv[1:])
    if argv[:1] == ["fidelity"]:  # rlrun against SB3/SBX at identical settings, over seeds (statistics)
        from rlrun.benchmarks.fidelity import main as fidelity_main

        return fidelity_main(argv[1:])
    if argv[:1] == ["sac_probe"]:  # which of SAC's unmapped differences act (rlrun.benchmarks.sac_probe)
        from rlrun.benchmarks.sac_probe import main as sac_probe_main

        return sac_probe_main(argv[1:])
    if argv[:1] == ["compiled"]:  # compile=true against eager on a device (rlrun.benchmarks.compiled)
        from rlrun.benchmarks.compiled import main as compiled_main

        return compiled_main(argv[1:])
    if argv[:1] == ["ddp"]:  # the data-parallel learner's all-reduce (rlrun.benchmarks.ddp, issue 39)
        from rlrun.benchmarks.ddp import main as ddp_main

        return ddp_main(argv[1:])
    args = parse_args(argv)
    use_huge_pages_for_large_tensors()  # as the rlrun command does, for every side
    torch.set_num_threads(1)  # rlrun's default (conf/config.yaml: threads: 1), for both sides
    selected = [b for b in BENCHMARKS if b in args.benchmarks] or list(BENCHMARKS)
    info = header()
    print("# rlrun benchmarks" + (" (--quick)" if args.quick else ""))
    for key, value in info.items():
        print(f"- {key}: {value}")
    results: dict = {"header": info, "quick": args.quick, "results": {}}
    for name in selected:
        module = importlib.import_module(f"rlrun.benchmarks.{name}")
        print(f"\n## {name}", flush=True)
        start = time.perf_counter()
        takes_workers = "workers" in inspect.signature(module.run).parameters
        extra = {"workers": args.workers} if args.workers and takes_workers else {}
        if args.compile and "compile" in inspect.signature(module.run).parameters:
            extra["compile"] = True
        result = module.run(quick=args.quick, reps=args.reps, **extra)
        result["wall_s"] = round(time.perf_counter() - start, 1)
        results["results"][name] = result
        print()
        print(module.render(result), flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1, default=str))
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
