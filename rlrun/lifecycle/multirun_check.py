"""A multirun's jobs checked before any starts (issue 40 §1, §3): ``rlrun -m total_frames=-5,512``
is one line and exit 2 with nothing made, not a sweep directory whose first job fails.

Each value of each swept key is composed once, the other swept keys at their first value, and
checked as a single run is (``rlrun.lifecycle.compose.compose_single``): a bad value is found
without composing every combination (a 4 x 4 x 4 grid: 10 composes, not 64). Values that are only
wrong together (a batch larger than the frames per batch) are left to their job. The sweep
directory is checked for links before Hydra writes ``multirun.yaml`` in it
(``rlrun.core.runfiles``). A search (``hydra/sweeper=...``) makes its trials' values as it goes:
its base command is checked, its values by each trial.
"""

from __future__ import annotations

from typing import Any

MULTIRUN_FLAGS = ("-m", "--multirun")


def is_multirun(argv: list[str]) -> bool:
    return any(a in MULTIRUN_FLAGS or a.replace(" ", "") == "hydra.mode=MULTIRUN" for a in argv)


def check_multirun(argv: list[str]) -> None:
    """Raises the first job's ``RlrunError`` (a bad value, a link in the sweep directory) for a
    multirun command line; returns at once for any other command."""
    if not is_multirun(argv):
        return
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from rlrun.core.private.hydra import create
    from rlrun.lifecycle.compose import CONF_DIR, compose_single

    overrides = [a for a in argv if not a.startswith("-") and not a.startswith("hydra.mode=")]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # noqa: BLE001 - the grammar error is reported by precheck and Hydra, as before
        return
    search = any(o.key_or_group.startswith("hydra/sweeper") for o in parsed)
    jobs = [[_first(o) for o in parsed]] if search else _jobs(parsed)
    hydra = create(CONF_DIR)
    try:
        cfg = None
        for job in jobs:
            cfg = compose_single([a for a in job if a is not None], hydra)
            _validate(cfg)
    finally:
        GlobalHydra.instance().clear()
    _check_sweep_dir(cfg)


def _validate(cfg: Any) -> None:
    """The job's sections as ``train`` checks them first (``validate_sections``), here, before any job."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import setup_globals
    from omegaconf import OmegaConf, open_dict

    from rlrun.core.config_schema import validate_sections

    if not OmegaConf.has_resolver("now"):
        setup_globals()
    HydraConfig.instance().set_config(cfg)  # ${hydra:...} in a job's values resolve as in the job
    job = cfg.copy()
    with open_dict(job):
        job.pop("hydra", None)
    validate_sections(job)


def _text(override: Any, value: str) -> str:
    return f"{override.get_key_element()}={value}"


def _first(override: Any) -> str | None:
    """The override with its first swept value (itself if not a sweep; None if not expandable)."""
    if not override.is_sweep_override():
        return override.input_line
    values = _values(override)
    return _text(override, values[0]) if values else None


def _values(override: Any) -> list[str]:
    try:  # choice(...), a,b,c, range(...); an interval is a search's, with no values to list
        return list(override.sweep_string_iterator())
    except Exception:  # noqa: BLE001
        return []


def _jobs(parsed: list[Any]) -> list[list[str | None]]:
    """One job per value of each swept key, the others at their first value."""
    base = [_first(o) for o in parsed]
    jobs = [base]
    for i, override in enumerate(parsed):
        if override.is_sweep_override():
            jobs += [[*base[:i], _text(override, v), *base[i + 1:]] for v in _values(override)[1:]]
    return jobs


def _check_sweep_dir(cfg: Any) -> None:
    """Refuses a sweep directory holding a link before Hydra writes in it."""
    if cfg is None:
        return
    from rlrun.core.runfiles import check_tree

    try:
        sweep_dir = str(cfg.hydra.sweep.dir)
    except Exception:  # noqa: BLE001 - a dir the job resolves: each run dir is checked by train()
        return
    check_tree(sweep_dir, key="hydra.sweep.dir")
