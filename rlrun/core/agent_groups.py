"""The rule that pairs algorithms with envs by agent layout, from what their factories declare.

Every env, model and loss factory may declare ``agent_layouts``: ``("single",)``
(the default: one agent, keys at the root), ``("group",)`` (an agent group) or both
(PPO's loss trains either). A loss declares it as a class attribute
(``rlrun.core.contracts.Loss``); an env or model factory as a function attribute
(``@register("env", "vmas", layouts=("group",))``). The check runs on the config,
before any component is built or any section is checked against its factory: an
algorithm preset for agent groups sets env options (``env.continuous_actions``)
that a single-agent env does not have, and the misfit, not the option, is what the
user must hear about. The names a fix suggests are computed from the presets and
the registry, never kept by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rlrun.core.errors import ConfigError
from rlrun.core.registry import lookup

SINGLE, GROUP_LAYOUT = "single", "group"


def layouts(kind: str, name: str) -> tuple[str, ...]:
    """The agent layouts the registered ``kind/name`` declares (``("single",)`` if it declares none)."""
    return lookup(kind, name, key=f"{kind}.name").agent_layouts


def check_agent_groups(cfg: Mapping[str, Any]) -> None:
    """Raises ``ConfigError`` when the model or loss does not train the env's agent layout."""
    env = cfg.get("env") or {}
    env_name = env.get("name")
    if not isinstance(env_name, str):
        return  # a _target_ env declares nothing to check
    env_layout = layouts("env", env_name)[0]
    for kind in ("model", "loss"):
        name = (cfg.get(kind) or {}).get("name")
        if not isinstance(name, str) or env_layout in layouts(kind, name):
            continue
        if env_layout == SINGLE:
            raise ConfigError(f"the algorithm's {kind} ({name}) trains an agent group, but "
                              f"env.name={env_name} is single-agent", key="env",
                              fix=f"use a multi-agent env ({_presets('env', GROUP_LAYOUT)}) or a "
                              "single-agent algorithm (`rlrun list algo`)")
        raise ConfigError(f"env.name={env_name} is an agent group, but the algorithm's {kind} ({name}) "
                          "is single-agent", key="algo",
                          fix=f"use a multi-agent algorithm: {_join(algos_for(GROUP_LAYOUT), 'algo')}")


def _conf() -> Path:
    return Path(str(files("rlrun.conf")))


def _preset_name(path: Path) -> str | None:
    name = OmegaConf.load(path).get("name")
    return name if isinstance(name, str) else None


def _presets(group: str, layout: str) -> str:
    """``env=a, env=b or env=c``: the presets of ``group`` whose component trains ``layout``."""
    root = _conf() / group
    names = [p.relative_to(root).with_suffix("").as_posix() for p in sorted(root.rglob("*.yaml"))
             if (n := _preset_name(p)) is not None and layout in layouts(group, n)]
    return _join(names, group)


def algos_for(layout: str) -> list[str]:
    """The algorithm presets whose model and loss both train ``layout``."""
    conf, names = _conf(), []
    for path in sorted((conf / "algo").glob("*.yaml")):
        chosen = {}
        for entry in OmegaConf.load(path).get("defaults") or []:
            if isinstance(entry, Mapping):
                chosen.update({str(k).lstrip("/"): v for k, v in entry.items()})
        parts = [_preset_name(conf / kind / f"{chosen[kind]}.yaml") for kind in ("model", "loss")
                 if isinstance(chosen.get(kind), str) and (conf / kind / f"{chosen[kind]}.yaml").is_file()]
        if len(parts) == 2 and all(n is not None and layout in layouts(k, n)
                                   for k, n in zip(("model", "loss"), parts)):
            names.append(path.stem)
    return names


def _join(names: list[str], group: str) -> str:
    """``algo=a, algo=b or algo=c``: each a complete override the user can paste."""
    items = [f"{group}={n}" for n in names]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" or {items[-1]}"
