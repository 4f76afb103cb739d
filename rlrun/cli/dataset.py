"""``rlrun dataset``: make offline datasets and list the local ones.

    rlrun dataset make env=<env> kind=<medium-replay|medium|expert> [key=value ...]
    rlrun dataset list [root=<dir>]

Datasets live under ``root=``, else ``$MINARI_DATASETS_PATH``, else minari's
``~/.minari/datasets``; ``rlrun algo=iql dataset=<id>`` reads them from there.
"""

from __future__ import annotations

import math
import os
import sys

from rlrun.core.errors import ConfigError, RlrunError, did_you_mean

USAGE = ("usage: rlrun dataset make env=<env> kind=<medium-replay|medium|expert> [key=value ...]\n"
         "       rlrun dataset list [root=<dir>]")


def list_main(args: list[str]) -> int:
    """Prints one line per local dataset: id, episodes, steps, returns, source run."""
    from rlrun.datasets.minari_format import dataset_root, list_datasets

    root = None
    for a in args:
        key, eq, value = a.partition("=")
        if key != "root" or not eq:
            raise ConfigError(f"unknown argument {a!r}", key=key, fix="rlrun dataset list [root=<dir>]")
        root = value
    infos = list_datasets(root)
    if not infos:
        print(f"no datasets under {dataset_root(root)}; make one with "
              "`rlrun dataset make env=pendulum kind=medium-replay`")
        return 0
    width = max(len("id"), *(len(d.dataset_id) for d in infos))
    print(f"{'id':<{width}}  {'episodes':>8}  {'steps':>9}  {'mean':>9}  {'min':>9}  {'max':>9}  source")
    for d in infos:
        fig = ["n/a" if math.isnan(x) else f"{x:.1f}" for x in (d.mean_return, d.min_return, d.max_return)]
        print(f"{d.dataset_id:<{width}}  {d.episodes:>8}  {d.steps:>9}  {fig[0]:>9}  {fig[1]:>9}  "
              f"{fig[2]:>9}  {d.source}")
    return 0


def main(argv: list[str]) -> int:
    """Dispatches ``rlrun dataset <make|list>``; bad input is one message and exit code 2."""
    commands = ("make", "list")
    try:
        if not argv or argv[0] in ("-h", "--help"):
            print(__doc__ if argv else USAGE)
            return 0 if argv else 2
        if argv[0] not in commands:
            raise ConfigError(f"unknown dataset command {argv[0]!r}.{did_you_mean(argv[0], commands)}",
                              fix="use `rlrun dataset make ...` or `rlrun dataset list`")
        if argv[0] == "list":
            return list_main(argv[1:])
        from rlrun.cli.make_dataset import make

        make(argv[1:])
        return 0
    except RlrunError as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"rlrun: error: {err.render()}", file=sys.stderr)
        return err.exit_code
