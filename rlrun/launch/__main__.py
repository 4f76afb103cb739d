"""``python -m rlrun.launch``: follow launched jobs, rerun a search's best trial.

    python -m rlrun.launch status SWEEP_DIR [--json]        one line per job (job.json + SLURM)
    python -m rlrun.launch best STUDY_DIR [--seed N] [--run-dir DIR] [--dry-run] [--trust-code]
                                                            [key=value ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlrun.core.errors import RlrunError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlrun.launch", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="state of every job of a sweep (job.json files + SLURM)")
    status.add_argument("sweep_dir", type=Path)
    status.add_argument("--json", action="store_true", help="print the records as JSON")
    status.add_argument("--no-refresh", action="store_true", help="do not ask SLURM")
    best = sub.add_parser("best", help="rerun the best trial of a search from its saved config")
    best.add_argument("study_dir", type=Path, help="the search's sweep directory (holds best.yaml)")
    best.add_argument("overrides", nargs="*", help="key=value changes, e.g. total_frames=100000")
    best.add_argument("--seed", type=int, default=None, help="default: the trial's first seed")
    best.add_argument("--run-dir", type=Path, default=None, help="default: <study_dir>/best/seed_<seed>")
    best.add_argument("--dry-run", action="store_true", help="print the config, do not train")
    best.add_argument("--trust-code", action="store_true",
                      help="accept _target_ (code) in the saved files; each import is printed first")
    args, extra = parser.parse_known_args(argv)  # key=value may come after options
    if extra and (args.command != "best" or any("=" not in e or e.startswith("-") for e in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    try:
        if args.command == "status":
            return _status(args)
        return _best(args)
    except RlrunError as err:
        print(f"rlrun: error: {err.render()}", file=sys.stderr)
        return err.exit_code


def _status(args: argparse.Namespace) -> int:
    from rlrun.launch.status import find_status, format_table, refresh

    records = find_status(args.sweep_dir)
    if not records:
        print(f"no job.json under {args.sweep_dir}", file=sys.stderr)
        return 1
    if not args.no_refresh:
        records = refresh(records)
    print(json.dumps(records, indent=2) if args.json else format_table(records))
    return 0


def _best(args: argparse.Namespace) -> int:
    from rlrun.core.signals import exit_code
    from rlrun.launch.best import rerun_best

    summary = rerun_best(args.study_dir, args.overrides, args.seed, args.run_dir, args.dry_run,
                         args.trust_code)
    if summary is None:
        return 0
    ret = summary.get("eval/episode_return")
    print(f"[rlrun] {summary['status']}: {summary['frames']} frames, eval return "
          f"{'n/a' if ret is None else f'{ret:.2f}'} -> {summary['run_dir']}", file=sys.stderr)
    return exit_code(summary)


if __name__ == "__main__":
    sys.exit(main())
