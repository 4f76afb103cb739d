"""``rlrun explain [overrides]``: a composed run at a glance.

Prints what the config resolves to — the algorithm's declared capabilities,
the derived loop settings and, per hook point, the hooks in the order they
will run, with the keys each reads and writes and where each comes from —
the CleanRL virtue of seeing a whole algorithm on one page, for a composed one.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from rlrun.core.errors import RlrunError


def compose_config(overrides: list[str]):
    """The resolved run config for ``overrides``, as ``rlrun`` would compose it (no run directory)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict

    from rlrun.lifecycle.compose import CONF_DIR, register_resolvers

    register_resolvers()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # so that ${hydra:...} interpolations resolve
    with open_dict(cfg):
        del cfg["hydra"]
    OmegaConf.resolve(cfg)
    return cfg


def explain(overrides: list[str]) -> str:
    """The text ``rlrun explain`` prints for these overrides."""
    import torch

    from rlrun.core.config_schema import validate_sections
    from rlrun.lifecycle.build import build_parts
    from rlrun.trainer.builtins import Checkpointing
    from rlrun.trainer.loop import Trainer
    from rlrun.trainer.wiring import describe

    cfg = compose_config(overrides)
    validate_sections(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        run = build_parts(cfg, Path(tmp), torch.device("cpu"))
        try:
            hooks = {**run.hooks, "checkpoint": Checkpointing(lambda trainer: None, 0)}
            origins = {**run.origins, "checkpoint": "built in: checkpoint.*"}
            order = Trainer(run.collector, run.loss, run.optimizer, hooks, policy=run.policy,
                            provided=run.provided, budget=run.budget).order
            loss = run.loss
            if run.budget.unit == "updates":
                # the offline source holds its dataset; oDT's online source finds it in its buffer
                data = getattr(run.collector, "data", None)
                held = f" ({data.num_episodes} episodes, {data.num_steps} steps)" if data is not None else ""
                source = (f"source    {type(run.collector).__name__}: dataset {cfg.dataset}{held}; "
                          f"samples hold {', '.join(sorted(run.buffer.sample_keys))}")
                loop = (f"loop      {run.budget.total} updates in rounds of {run.optim_steps_per_epoch}; "
                        f"gamma {cfg.gamma}")
            else:
                source = (f"collector {type(run.collector).__name__}: {cfg.collector.frames_per_batch} "
                          f"frames per batch over {run.env.num_envs} envs; batches hold "
                          f"{', '.join(sorted(run.provided))}")
                loop = (f"loop      per batch: {run.epochs_per_batch} epoch(s) x {run.optim_steps_per_epoch} "
                        f"optimiser step(s), from frame {run.learning_starts}; gamma {cfg.gamma}")
            lines = [
                f"loss      {type(loss).__name__} ({'on' if loss.on_policy else 'off'}-policy; "
                f"actions: {', '.join(loss.action_spaces)}; reads {', '.join(loss.reads)})",
                f"policy    {type(run.policy.actor).__name__} ({run.policy.head})"
                + (f" + {type(run.policy.exploration).__name__}" if run.policy.exploration else "")
                + (f", critic {type(run.policy.critic).__name__}" if run.policy.critic is not None else ""),
                source,
                loop,
                "",
                describe(order, hooks, origins),
            ]
        finally:
            run.close()
    return "\n".join(lines)


def main(args: list[str]) -> int:
    if any(a in ("-h", "--help") for a in args):
        print(__doc__.strip())
        return 0
    try:
        from rlrun.lifecycle.compose import precheck

        precheck(args)
        print(explain([a for a in args if not a.startswith("-")]))
    except RlrunError as err:
        print(f"rlrun: error: {err.render()}", file=sys.stderr)
        return err.exit_code
    return 0
