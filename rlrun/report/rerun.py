"""The ``rlrun`` command line that reruns a tracked run, rebuilt from what the tracker stores.

A run logs its whole resolved config as flat params (``str`` of each value) and its presets as
the ``algo`` and ``env`` tags; a paper run also logs ``paper.*`` params naming its preset. The
command composes those presets (``+paper=<table>/<cell>``, else ``algo=``/``env=``) as ``rlrun``
would, then adds one override per param whose value differs (``+key=`` for keys the presets do
not have, ``~key`` for preset keys the run did not log). Where and how the run was logged
(``logger``, ``progress``, ``resume``, ``dataset_root``) is left out: the rerun logs to the
default store of the directory it is launched from. Every argument is shell-quoted, and
tracker values are parsed as Python literals only (``ast.literal_eval``), never evaluated.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass
from functools import cache
from typing import Any

from rlrun.core.confighash import config_hash

SKIP = ("logger", "progress", "resume", "resume_allow_changes", "dataset_root", "hydra")
"""Params that say where and how a run was logged or resumed, not what it ran."""
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./:-]*")
_KEYWORDS = {"true", "false", "null", "nan", "inf", "none"}
MAX_REMOVED = 3
"""More preset keys than this absent from the params: they are not a whole rlrun config (no command)."""


@dataclass
class Rerun:
    """A rerun command, or why there is none; ``exact`` when it composes to the run's config hash."""

    command: str | None
    exact: bool = False
    reason: str = ""


def _skipped(key: str) -> bool:
    return any(key == s or key.startswith(s + ".") for s in SKIP)


@cache
def paper_presets() -> dict[tuple[str, str, str], str]:
    """``(paper.table, paper.algo, paper.env)`` -> the shipped preset name (``table1/ppo_hopper``)."""
    import yaml

    from rlrun.lifecycle.compose import CONF_DIR

    out = {}
    for path in sorted((CONF_DIR / "paper").glob("*/*.yaml")):
        paper = (yaml.safe_load(path.read_text()) or {}).get("paper") or {}
        key = (str(paper.get("table")), str(paper.get("algo")), str(paper.get("env")))
        out.setdefault(key, f"{path.parent.name}/{path.stem}")
    return out


def _preset_exists(group: str, name: str | None) -> bool:
    from rlrun.lifecycle.compose import CONF_DIR

    return bool(name) and _PLAIN.fullmatch(name) is not None and (CONF_DIR / group / f"{name}.yaml").is_file()


def base_overrides(params: dict[str, str], tags: dict[str, str]) -> list[str]:
    """The preset choices a run was composed from, as far as the tracker tells them."""
    preset = paper_presets().get((str(params.get("paper.table")), str(params.get("paper.algo")),
                                  str(params.get("paper.env"))))
    if preset is not None:
        return [f"+paper={preset}"]
    return [f"{group}={tags[group]}" for group in ("algo", "env") if _preset_exists(group, tags.get(group))]


@cache
def _composed(base: tuple[str, ...]) -> dict[str, str]:
    from omegaconf import OmegaConf

    from rlrun.lifecycle.explain import compose_config
    from rlrun.lifecycle.run import flatten

    cfg = compose_config(list(base))
    return {k: str(v)[:6000] for k, v in flatten(OmegaConf.to_container(cfg, resolve=True)).items()}


def literal(text: str) -> Any:
    """A logged param (``str`` of a config value) back as the value: a Python literal, else the text."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def hydra_value(value: Any) -> str:
    """A value in Hydra's override grammar (strings quoted where Hydra would read them otherwise)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_dict_key(k)}:{hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value).replace("${", "\\${")  # a literal "${", never an interpolation on rerun
    if _PLAIN.fullmatch(text) and text.lower() not in _KEYWORDS and literal(text) == text:
        return text
    # Hydra's quoted strings: a backslash run before a quote (or the closing one) is doubled
    text = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, text)
    return "'" + text.replace("'", "\\'") + "'"


def _dict_key(key: Any) -> str:
    text = str(key)
    if not _PLAIN.fullmatch(text):
        raise ValueError(f"dict key {text!r} cannot be written as an override")
    return text


def overrides(params: dict[str, str], composed: dict[str, str]) -> list[str]:
    """The overrides that turn the composed presets' flat config into the run's logged params."""
    out = []
    for key in sorted(params):
        if _skipped(key) or (composed.get(key) == params[key] and key != "seed"):  # the seed: always said
            continue
        value = hydra_value(literal(params[key]))
        out.append(f"{key}={value}" if key in composed else f"+{key}={value}")
    removed = [key for key in sorted(composed) if key not in params and not _skipped(key)]
    if len(removed) > MAX_REMOVED:
        raise ValueError(f"the logged params are not a whole rlrun config ({len(removed)} keys of the "
                         f"presets missing, e.g. {', '.join(removed[:3])})")
    return [*out, *(f"~{key}" for key in removed)]


def command(args: list[str]) -> str:
    """``rlrun <args>``, each argument quoted for a POSIX shell."""
    return " ".join(["rlrun", *(shlex.quote(a) for a in args)])


def rerun(params: dict[str, str], tags: dict[str, str], verify: bool = True) -> Rerun:
    """The command that reruns a run with these logged params and tags.

    Args:
        params: The run's params as MLflow stores them (text).
        tags: The run's tags (``algo``, ``env``: the preset choices).
        verify: Compose the command's config and compare its hash with the run's (a second
            compose); ``exact`` says whether they agree.
    """
    if not params:
        return Rerun(None, reason="the run logged no params")
    base = base_overrides(params, tags)
    try:
        composed = _composed(tuple(base))
        args = [*base, *overrides(params, composed)]
    except ValueError as err:  # params that are not a whole config, a value Hydra cannot write
        return Rerun(None, reason=str(err))
    except Exception as err:  # a preset of a plugin not installed here
        return Rerun(None, reason=f"cannot compose {' '.join(base) or 'the defaults'} here "
                     f"({type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''})")
    if not verify:
        return Rerun(command(args))
    try:
        again = _composed(tuple(args))
    except Exception as err:
        return Rerun(command(args), reason=f"the command does not compose here ({type(err).__name__})")
    exact = config_hash(again) == config_hash(params)
    return Rerun(command(args), exact, "" if exact else "its composed config differs from the logged params")
