"""Every composable config of the shipped presets, to compare before and after a change to conf/.

    python tests/conf/composed_configs.py OUT.json
    python tests/conf/composed_configs.py --compare BEFORE.json AFTER.json

Composes every algo x env pair, every ``+paper=`` preset and every component preset on PPO and
SAC (what a command line composes, ``hydra`` section left out), and writes each config unresolved
and resolved, or the composition error. Two files compare type-exactly (``1`` is not ``1.0``), so
equal files mean equal config hashes (``rlrun.core.confighash``) and equal runs. Run both
from the same directory (``${hydra:runtime.cwd}`` resolves to it). Not a test: it takes minutes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from typing import Any


def override_sets(groups: dict[str, list[str]]) -> list[list[str]]:
    sets = [[f"algo={a}", f"env={e}"] for a, e in itertools.product(groups["algo"], groups["env"])]
    sets += [[f"+paper={p}"] for p in groups["paper"]]
    for group in ("loss", "model", "buffer", "optim", "exploration", "collector", "logger"):
        for option in groups[group]:
            sets += [[*base, f"{group}={option}"]
                     for base in (["algo=ppo", "env=cartpole"], ["algo=sac", "env=pendulum"])]
    return sets


def compose_all() -> dict[str, Any]:
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict

    from rlrun.lifecycle.compose import CONF_DIR, config_groups, register_resolvers

    register_resolvers()
    out: dict[str, Any] = {}
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        for overrides in override_sets(config_groups()):
            key = " ".join(overrides)
            try:
                cfg = compose("config", overrides=overrides, return_hydra_config=True)
            except Exception as err:  # a pair that does not compose must fail the same way after
                out[key] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0]}"}
                continue
            HydraConfig.instance().set_config(cfg)  # ${hydra:...} resolves
            with open_dict(cfg):
                del cfg["hydra"]
            raw = OmegaConf.to_container(cfg, resolve=False)
            try:
                resolved: Any = OmegaConf.to_container(cfg, resolve=True)
            except Exception as err:
                resolved = f"error: {type(err).__name__}"
            out[key] = {"raw": raw, "resolved": resolved}
    return out


def compare(before: dict[str, Any], after: dict[str, Any]) -> int:
    """Prints each config that differs; returns the number of them."""
    changed = [k for k in sorted(set(before) | set(after))
               if json.dumps(before.get(k), sort_keys=True) != json.dumps(after.get(k), sort_keys=True)]
    for key in changed:
        print(f"CHANGED  {key}")
    composed = sum("raw" in v for k, v in after.items() if k not in changed)
    print(f"{len(before) - len(changed)} of {len(before)} identical ({composed} of them composed), "
          f"{len(changed)} changed")
    return len(changed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        before, after = (json.loads(open(p).read()) for p in args.compare)
        return 1 if compare(before, after) else 0
    if not args.out:
        parser.error("give OUT.json or --compare BEFORE AFTER")
    configs = compose_all()
    with open(args.out, "w") as f:
        json.dump(configs, f, indent=0)
    print(f"{len(configs)} override sets, {sum('raw' in v for v in configs.values())} composed -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
