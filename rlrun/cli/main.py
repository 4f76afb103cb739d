"""The ``rlrun`` command: which command the arguments name, and its exit code.

    rlrun [overrides]            train (Hydra: -m for multirun, --cfg job, --help)
    rlrun list [kind]            registered components and config presets
    rlrun explain [overrides]    the composed run: capabilities, loop settings, hooks per point
    rlrun report ...             tables and learning curves from finished runs
    rlrun dataset make|list      offline datasets (Minari's layout) made with D4RL's recipe
    rlrun eval <run> [key=value] evaluate a run's policy (episodes=, seed=, deterministic=, video=)
    rlrun export <run> [--format pt2|onnx] [--out FILE]   a self-contained policy file

Config mistakes are caught before Hydra composes (unknown preset, misspelt
key) or while building (wrong type, bad value) and reported as one message
naming the key and the fix, with exit code 2. ``HYDRA_FULL_ERROR=1`` shows the
full traceback instead.
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys

from rlrun.core.errors import RlrunError
from rlrun.lifecycle.compose import (
    SIGNATURE_GROUP,
    list_components,
    precheck,
    quote_paths,
    register_resolvers,
)
from rlrun.lifecycle.multirun_check import check_multirun


def use_huge_pages_for_large_tensors() -> None:
    """Backs torch's CPU tensors of 2 MB and more with transparent huge pages, unless the user set
    ``THP_MEM_ALLOC_ENABLE`` already.

    Collected batches and replay storage are large, fresh allocations: with 4 KB pages, faulting
    them in costs more than writing them (216 MB on this project's 2-core machine: 0.17 s to
    allocate and write, 0.04 s to write again, 0.06 s to allocate and write with huge pages).
    torch reads the variable once, at its first allocation of 2 MB or more, so this runs before
    anything is built; worker processes inherit it.
    """
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def skip_the_final_garbage_collection() -> None:
    """At exit, moves every object into the generation the collector never visits (``gc.freeze``),
    so that the interpreter's last collection skips the heap: with torch imported that pass alone
    held the exit 1.5-4 s on this project's 2-core machine (a dead collector worker stopped the run
    in 3.9 s instead of about one). Other ``atexit`` handlers run as before, and runs close their
    files and trackers explicitly; what the skipped pass would have freed, the OS frees."""
    if not _AT_EXIT:
        _AT_EXIT.append(gc.freeze)
        atexit.register(gc.freeze)


_AT_EXIT: list = []


def main(argv: list[str] | None = None) -> int:
    """``rlrun``: exit code 0, 2 (bad input, see ``RlrunError``), 3 (diverged), 4 (a collector worker
    died, ``WorkerError``) or 128 + a signal."""
    command = argv is None  # the process's own command (rlrun, python -m rlrun), not a caller's
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv, command)
    except KeyboardInterrupt:  # Ctrl-C outside a training loop (set-up, eval, export, report): one line
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print("\n[rlrun] interrupted (SIGINT)", file=sys.stderr, flush=True)
        return 128 + signal.SIGINT


def _main(argv: list[str], command: bool = False) -> int:
    use_huge_pages_for_large_tensors()
    skip_the_final_garbage_collection()
    if argv[:1] == ["list"]:
        return list_components(argv[1:])
    if argv[:1] == ["explain"]:
        from rlrun.lifecycle.explain import main as explain_main

        return explain_main(argv[1:])
    if argv[:1] in (["eval"], ["export"]):
        from rlrun.cli.evaluate import main as eval_main
        from rlrun.cli.export import main as export_main

        return (eval_main if argv[0] == "eval" else export_main)(argv[1:])
    if argv[:1] == ["dataset"]:
        from rlrun.cli.dataset import main as dataset_main

        return dataset_main(argv[1:])
    if argv[:1] == ["report"]:
        from rlrun.report.cli import main as report_main

        return report_main(argv[1:])
    argv = quote_paths(argv)  # resume=<a run dir of rlrun's own naming>: its = and , are not grammar
    info_only = any(a in ("--help", "-h", "--hydra-help", "--info", "-i", "--cfg", "-c",
                          "--shell-completion", "-sc") or a.startswith("--cfg") for a in argv)
    if not info_only and _single_run(argv):  # composed once (beside torch's import), checked, trained
        from rlrun.cli.single import run_single

        return run_single(argv, beside=command)
    register_resolvers()
    shows_help = any(a in ("--help", "-h", "--hydra-help", "--shell-completion", "-sc") for a in argv)
    if not shows_help:  # --cfg and --info show this command's config: the same checks as its run
        try:
            precheck(argv)
            check_multirun(argv)  # every job's values, and the sweep dir, before any job starts
        except RlrunError as err:
            from rlrun.cli.single import config_error

            return config_error(err)
    if "--help" in argv or "-h" in argv:
        return _app_help(argv)
    from rlrun.cli.job import hydra_main

    return hydra_main(argv)


def _app_help(argv: list[str]) -> int:
    """Hydra's ``--help`` without the ``signature/*`` groups: those hold each component's factory
    defaults for presets to start from (``compose._store_signatures``), not choices to make on a
    command line. Hydra's help lists every group but its own (a fixed predicate in its
    ``get_help``), so its printed text is filtered."""
    import contextlib
    import io

    from rlrun.cli.job import hydra_main

    text = io.StringIO()
    try:
        with contextlib.redirect_stdout(text):
            return hydra_main(argv)
    finally:
        sys.stdout.write("".join(line for line in text.getvalue().splitlines(keepends=True)
                                 if not line.startswith(f"{SIGNATURE_GROUP}/")))
        sys.stdout.flush()


def _single_run(argv: list[str]) -> bool:
    """Only overrides, none of them Hydra's mode: one run, which ``rlrun.cli.single`` composes once."""
    return all(not a.startswith("-") and not a.lstrip("+~").startswith("hydra.mode") for a in argv)


if __name__ == "__main__":
    sys.exit(main())
