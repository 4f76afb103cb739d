"""Composing and checking a command line's config before anything is built: the config tree
(``CONF_DIR``), rlrun's resolvers, ``precheck`` (overrides, keys, values, env ids, the run
directory) and ``compose_single`` (one compose for a single run, checked). Every ``rlrun`` command and the
launchers read the config through here."""


from __future__ import annotations

import contextlib
import hashlib
import re
import sys
import tempfile
from importlib.resources import files
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rlrun import __version__
from rlrun.core.errors import ConfigError, did_you_mean

CONF_DIR = Path(str(files("rlrun.conf")))
SWEEPS_DIR = Path(str(files("rlrun.sweeps")))  # on Hydra's search path through rlrun's plugin
_NOT_FOUND = object()
MAX_KEY_LEN = 200  # the longest real key is under 60 characters
PROBE_BYTES = 64 * 1024  # room the run directory must have at start: Hydra's and rlrun's config files


def quote_paths(argv: list[str]) -> list[str]:
    """``key=<path>`` where the path exists and holds characters of Hydra's override grammar (``=``,
    ``,``, a space: rlrun's own run directory names, ``resume=runs/ppo-cartpole/seed=1,lr=0.1``),
    written as a quoted value, which Hydra reads as the string it is; any other argument unchanged."""
    out = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        if (eq and not arg.startswith("-") and key.lstrip("+~").replace(".", "").replace("_", "").isalnum()
                and any(c in value for c in "=, ") and value[:1] not in ("'", '"') and Path(value).exists()):
            arg = f"{key}='{value.replace(chr(92), chr(92) * 2).replace(chr(39), chr(92) + chr(39))}'"
        out.append(arg)
    return out


def _run_name(override_dirname: str) -> str:
    """Directory name for a run's overrides; long ones are cut and keep a hash (names <= 255 bytes)."""
    name = override_dirname.replace("/", "_") or "default"
    if len(name) > 160:
        name = f"{name[:140]}-{hashlib.sha1(name.encode()).hexdigest()[:12]}"
    return name


def _ceil_div(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def env_name(choice: str, env_id: str | None) -> str:
    """The env part of a run's name and tag: the preset, unless ``env.id`` was changed from it.

    A run on another id is named after that id (its module part dropped), never after the
    default preset: ``env.id=mypkg.envs:Corridor-v0`` gives ``Corridor-v0``.
    """
    preset = CONF_DIR / "env" / f"{choice}.yaml"
    if env_id is None or (preset.is_file() and OmegaConf.load(preset).get("id") == env_id):
        return choice
    return str(env_id).rpartition(":")[2].replace("/", "_")


def _run_name_excluded(task_overrides: list[str]) -> list[str]:
    """Hydra's ``override_dirname.exclude_keys``: the keys of this command's overrides that
    ``rlrun.core.confighash.RUN_NAME_EXCLUDED`` leaves out of the run's name (Hydra compares exactly,
    so the list is made per command from the one list of prefixes)."""
    from rlrun.core.confighash import run_name_excluded

    keys = [o.lstrip("~+").partition("=")[0].partition("@")[0] for o in task_overrides]
    return run_name_excluded(keys)


def register_resolvers(signatures: bool = True) -> None:
    """Registers what composing conf/ needs: rlrun's resolvers and the signature nodes.

    Every command, launcher job and test composes after calling this, so it is the one place.
    ``signatures=False`` registers the resolvers alone: enough to resolve a config composed
    in another process (``rlrun.cli.single``), without the signatures' imports."""
    for name, fn in (("rlrun_run_name", _run_name), ("ceil_div", _ceil_div), ("rlrun_env_name", env_name),
                     ("rlrun_run_name_excluded", _run_name_excluded)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
    if signatures:
        _store_signatures()


SIGNATURE_GROUP = "signature"
_signature_node: type | None = None


def _signature_node_type() -> type:
    """A ConfigStore entry holding a component's options at their defaults as plain data.

    Hydra deep-copies the whole ConfigStore on every compose (``CachingConfigRepository``) and
    copies an entry when a config loads it (``ConfigStore.load``): the deep copy shares the data,
    which nothing mutates, and only the load's copy builds the DictConfig. Entries built as
    DictConfigs up front, or rebuilt by each deep copy, cost 40-50 ms of CPU per compose (55 nodes).
    Made on first use: hydra is imported only to compose (``rlrun list`` does not import it).
    """
    global _signature_node
    if _signature_node is None:
        from hydra.core.config_store import ConfigNode

        class SignatureNode(ConfigNode):
            def __copy__(self) -> ConfigNode:
                return ConfigNode(name=self.name, node=OmegaConf.create(self.node), group=self.group,
                                  package=self.package, provider=self.provider)

            def __deepcopy__(self, memo: dict) -> SignatureNode:
                return self

            def __reduce__(self) -> tuple:  # launchers pickle the store (Singleton.get_state)
                return _signature_entry, (self.name, self.node, self.group, self.package, self.provider)

        _signature_node = SignatureNode
    return _signature_node


def _signature_entry(*fields: Any) -> Any:
    return _signature_node_type()(*fields)


def _store_signatures() -> None:
    """Stores each built-in component's options at their factory defaults as the Hydra config
    ``signature/<kind>/<name>`` (``rlrun.core.component_index``, no torch import).

    A preset starts from it (``defaults: [/signature/loss/sac@_here_]``) and states only what it
    sets differently, yet the composed config shows every option: ``rlrun --cfg job``, overrides
    such as ``loss.tau=0.01`` and Hydra's struct checks see the factory's keys, and the default
    values have one home, the factory's signature.
    """
    from hydra.core.config_store import ConfigStore

    repo = ConfigStore.instance().repo
    if SIGNATURE_GROUP in repo:
        return
    from rlrun.core.component_index import signature_nodes

    groups: dict[str, dict[str, Any]] = {}
    for (kind, name), node in signature_nodes().items():  # ConfigStore.store's layout, built lazily
        groups.setdefault(kind, {})[f"{name}.yaml"] = _signature_entry(
            f"{name}.yaml", node, f"{SIGNATURE_GROUP}/{kind}", None, "rlrun")
    repo[SIGNATURE_GROUP] = groups


def _group_dirs() -> dict[str, Path]:
    """Config group name -> its directory: conf/ groups, conf/hydra/<group>, and sweeps/ groups."""
    dirs: dict[str, Path] = {}
    for root in (CONF_DIR, SWEEPS_DIR):
        for d in sorted(root.iterdir()):
            if not d.is_dir() or d.name.startswith(("_", ".")):
                continue
            if root is CONF_DIR and d.name == "hydra":
                dirs.update({f"hydra/{sub.name}": sub for sub in sorted(d.iterdir()) if sub.is_dir()})
            else:
                dirs[d.name] = d
    return dirs


def config_groups() -> dict[str, list[str]]:
    """Config groups of the shipped tree (conf/ and sweeps/) and their options."""
    return {name: sorted(str(p.relative_to(d).with_suffix("")) for p in d.rglob("*.yaml"))
            for name, d in _group_dirs().items()}


def _first_comment(path: Path) -> str:
    """The preset's first comment block (its description), on one line."""
    block: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("#") and not line.startswith("# @package"):
            block.append(line.lstrip("# ").strip())
        elif block:
            break
    return " ".join(block)


def list_components(args: list[str]) -> int:
    """Prints registered components and config presets, one line each (no torch import)."""
    from rlrun.core.component_index import summaries
    from rlrun.core.registry import KINDS

    kind = args[0] if args else None
    groups, dirs = config_groups(), _group_dirs()
    if kind and kind not in KINDS and kind not in groups:
        print(f"rlrun: error: unknown kind {kind!r}.{did_you_mean(kind, [*KINDS, *groups])}\n"
              f"  fix: use one of {', '.join(sorted({*KINDS, *groups}))}", file=sys.stderr)
        return 2
    if kind is None or kind in groups:
        print("config presets (select with group=option):")
        for group, options in groups.items():
            if kind in (None, group):
                for opt in options:
                    print(f"  {f'{group}={opt}':<28} {_first_comment(dirs[group] / f'{opt}.yaml')}")
    if kind is None or kind in KINDS:
        print("registered components (name: in a config node):")
        for k, name, summary in summaries(kind if kind in KINDS else None):
            print(f"  {f'{k}/{name}':<28} {summary}")
    return 0


def precheck(args: list[str]) -> None:
    """Reports unknown presets and misspelt keys with a fix (``ConfigError``), before Hydra composes:
    the checks of every command that hands its overrides to Hydra (multiruns, ``explain``, launchers).
    A single run composes and checks at once (``compose_single``)."""
    from hydra import compose, initialize_config_dir

    checks = _Overrides(args)
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides=checks.groups, return_hydra_config=True)
    except Exception as err:
        _not_in_defaults(err, checks.parsed)
        raise
    checks.against(cfg)


def compose_single(args: list[str], hydra: Any) -> Any:
    """A single run's config, composed once on ``hydra`` (``rlrun.core.private.hydra.create``) and
    checked: overrides, keys, ``${refs}``, the env id, the run's sections (``ConfigError``).

    Composing takes 0.3-0.6 s, and Hydra's own path composes three times. A config that does not
    compose is composed again from its presets alone, whose checks name the mistake; if they find
    none, Hydra reports it as ``hydra.main`` would (its message, exit 1)."""
    from rlrun.core.private.hydra import report

    checks = _Overrides(args)
    cfg = compose_run(hydra, checks.overrides)
    if cfg is None:
        from hydra.types import RunMode

        try:
            presets = hydra.compose_config("config", checks.groups, run_mode=RunMode.RUN, from_shell=False)
        except Exception as err:
            _not_in_defaults(err, checks.parsed)
            raise
        checks.against(presets)
        cfg = report(lambda: _compose(hydra, checks.overrides))
    _check_refs(checks.parsed, cfg)  # every override applied: the keys exist; only ${refs} are left
    check_env_id(cfg)
    check_run_sections(cfg)
    return cfg


class _Overrides:
    """A command line's overrides, parsed and checked alone (grammar, key lengths, preset names,
    the run directory's room); ``against`` checks them on the presets' config."""

    def __init__(self, args: list[str]):
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.core.override_parser.types import ValueType

        register_resolvers()  # conf/config.yaml uses them; every command prechecks (explain, eval, runs)
        self.overrides = [a for a in args if not a.startswith("-") and ("=" in a or a.startswith("~"))]
        try:
            self.parsed = OverridesParser.create().parse_overrides(self.overrides)
        except Exception as err:
            for arg in self.overrides:  # a value holding Hydra's grammar (a path that does not exist yet)
                key, _, value = arg.partition("=")
                if any(c in value for c in "=,") and value[:1] not in ("'", '"'):
                    raise ConfigError(f"the value {value!r} holds '=' or ',', which Hydra's override "
                                      "grammar reads as syntax", key=key.lstrip("+~"),
                                      fix=f"quote it: \"{key}='{value}'\" (an existing path is quoted for "
                                      "you: check that it exists)") from None
            raise ConfigError(f"cannot parse overrides: {err}",
                              fix="write overrides as key=value, e.g. seed=1") from None
        for o in self.parsed:  # a long key would reach the file system as a config group name (OSError 36)
            key = o.key_or_group
            if len(key) > MAX_KEY_LEN:
                raise ConfigError(f"override key of {len(key)} characters", key=f"{key[:40]}...",
                                  fix="config keys are short names: check the override "
                                  "(see `rlrun --cfg job`)")
        _check_writable(self.parsed, multirun=any(a in ("-m", "--multirun") for a in args))
        groups = config_groups()
        self.groups: list[str] = []
        self.values: list = []
        self.edits: list = []
        for o in self.parsed:
            key = o.key_or_group
            if key.startswith("hydra") or o.package:
                continue
            if key in groups:
                if o.value_type == ValueType.GLOB_CHOICE_SWEEP:
                    continue  # Hydra expands and checks globs itself
                values = ([str(v) for v in o.sweep_iterator()] if o.is_sweep_override()
                          else [str(o.value())])
                for v in values:
                    if v not in groups[key]:
                        raise ConfigError(f"unknown {key} {v!r}.{did_you_mean(v, groups[key])}",
                                          key=key, fix=f"use one of: {', '.join(groups[key])}")
                if not o.is_sweep_override():
                    self.groups.append(o.input_line)
            elif o.is_add() or o.is_delete():
                self.edits.append(o)
            elif not o.is_force_add():
                self.values.append(o)

    def against(self, cfg: Any) -> None:
        """Misspelt keys, adds of keys that exist, deletes of keys that do not, ``${refs}`` to none,
        on ``cfg`` (the presets' config: the overrides of values not applied)."""
        for o in self.values:
            parent_key, _, leaf = o.key_or_group.rpartition(".")
            parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
            if parent is None or not OmegaConf.is_dict(parent):
                raise ConfigError(f"{parent_key or o.key_or_group!r} is not a config section",
                                  key=o.key_or_group, fix="check the key with `rlrun --cfg job`")
            if leaf not in parent:
                raise ConfigError(
                    f"no such config key.{did_you_mean(leaf, [str(k) for k in parent.keys()])}",
                    key=o.key_or_group,
                    fix=f"see the valid keys with `rlrun --cfg job`; to add a new key use "
                    f"+{o.key_or_group}=...")
        deleted: list[str] = []  # Hydra applies overrides in order: `~k +k={...}` re-adds k
        for o in self.edits:  # Hydra refuses these too, but in 4 lines and with exit 1
            key = o.key_or_group
            there = (OmegaConf.select(cfg, key, default=_NOT_FOUND) is not _NOT_FOUND
                     and not any(key == d or key.startswith(d + ".") for d in deleted))
            if o.is_delete():
                deleted.append(key)
            if o.is_add() and there:
                raise ConfigError("the key exists already, so it cannot be added with +", key=o.key_or_group,
                                  fix=f"drop the +: {o.key_or_group}=...")
            if o.is_delete() and not there:
                raise ConfigError("no such config key to delete", key=o.key_or_group,
                                  fix="check the key with `rlrun --cfg job`")
        _check_refs(self.parsed, cfg)


def _not_in_defaults(err: Exception, parsed: list) -> None:
    """``paper=table1/x`` (as `rlrun list` shows the group) where only ``+paper=`` adds it: Hydra's
    30-line traceback with the hint last becomes one line naming the group and the fix."""
    found = re.search(r"Could not override '([^']+)'\. No match in the defaults list", str(err))
    if found is None:
        return
    group = found.group(1)
    line = next((o.input_line for o in parsed if o.key_or_group == group), f"{group}=...")
    raise ConfigError("is a config group that no preset includes, so it is added, not overridden",
                      key=group, fix=f"write +{line.lstrip('+')}") from None


def _check_refs(parsed: list, cfg) -> None:
    for o in parsed:  # ${key} in a value must name a key, or Hydra fails with a traceback
        value = o.value() if not o.is_sweep_override() else None
        for ref in re.findall(r"\$\{([A-Za-z_][\w.]*)\}", value if isinstance(value, str) else ""):
            if OmegaConf.select(cfg, ref, default=_NOT_FOUND) is _NOT_FOUND:
                raise ConfigError(f"${{{ref}}} refers to no config key", key=o.key_or_group,
                                  fix="refer to an existing key (see `rlrun --cfg job`) or write the value")


def _check_writable(parsed: list, multirun: bool) -> None:
    """Creates the directory runs go to (as Hydra will) and writes ``PROBE_BYTES`` there, or raises
    ConfigError.

    That is ``hydra.run.dir`` (``hydra.sweep.dir`` with ``-m``) when given
    without interpolations, else ``runs/`` under the current directory, where
    every shipped run and sweep directory lives.
    """
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    given = next((str(o.value()) for o in parsed if o.key_or_group == key and not o.is_sweep_override()),
                 None)
    path = Path(given) if given and "${" not in given else Path("runs")
    made = [p for p in (path, *path.parents) if not p.exists()]  # deepest first
    try:
        for attempt in range(3):
            path.mkdir(parents=True, exist_ok=True)
            try:
                with tempfile.TemporaryFile(dir=path) as probe:  # bytes, not just a name: a full disk
                    probe.write(bytes(PROBE_BYTES))             # fails here, not in Hydra's own writes
                    probe.flush()
                break
            except FileNotFoundError:  # a concurrent launch removed the empty directory it had made
                if attempt == 2:
                    raise
    except OSError as err:
        where = f"{path}" if given else f"runs/ in the current directory {Path.cwd()}"
        raise ConfigError(f"cannot write the run directory {where} ({err.strerror or err})", key=key,
                          fix=f"set {key}=<a writable directory>" + ("" if given else
                              ", or run rlrun from a writable directory")) from None
    finally:  # Hydra makes them again for a run that goes on; a refused command leaves none behind
        for p in made:
            with contextlib.suppress(OSError):
                p.rmdir()


def env_package(env_id: str) -> str | None:
    """The distribution implementing a gymnasium id (mujoco, ale-py, a user's package), if not gymnasium."""
    import gymnasium as gym

    try:
        entry = gym.spec(env_id.rpartition(":")[2]).entry_point
    except Exception:  # unknown id: the build reports it
        return None
    module = entry if isinstance(entry, str) else getattr(entry, "__module__", "")
    if "mujoco" in module:
        return "mujoco"
    top = module.split(":")[0].split(".")[0]
    return None if top in ("", "gymnasium") else top.replace("_", "-")


def package_versions(env_id: str | None) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    packages = ["torch", "tensordict", "gymnasium", *([p] if env_id and (p := env_package(env_id)) else [])]
    out = {"rlrun_version": __version__}
    for pkg in packages:
        try:
            out[f"version.{pkg}"] = version(pkg)
        except PackageNotFoundError:
            pass
    return out



def compose_run(hydra: Any, overrides: list[str]) -> Any:
    """The single run's config as ``Hydra.run`` composes it (logging configured), or None if it fails."""
    try:
        return _compose(hydra, overrides)
    except Exception:  # the checks on the preset-only config name the mistake, or Hydra reports it
        return None


def _compose(hydra: Any, overrides: list[str]) -> Any:
    from hydra.types import RunMode

    return hydra.compose_config("config", [*overrides, "hydra.mode=RUN"], run_mode=RunMode.RUN,
                                with_log_configuration=True)


def check_run_sections(cfg: Any) -> None:
    """The run's own sections (budgets, gamma, seed, trainer, eval, checkpoint) against their schema,
    before Hydra makes the run directory or the tracker opens its store (``total_frames=-5`` left
    both behind, 8-19 s later); components are the build's to check (their factories import torch)."""
    from rlrun.core.config_schema import COMPONENT_SECTIONS, RunConfig, check_dataclass

    try:
        node = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
                for k, v in cfg.items_ex(resolve=False) if k not in COMPONENT_SECTIONS and k != "hydra"}
    except Exception:  # an interpolation that fails (or a value still ???): validation reports it
        return
    check_dataclass(RunConfig, node, "")


def check_env_id(cfg: Any) -> None:
    """An unknown gymnasium id, found before torch is imported (the build finds it 2-3 s later).

    Only a plain id (no ``module:`` part, no ``env.imports``) of the gymnasium backend: any other
    (a package that registers ids on import, EnvPool, Atari, VMAS) is the build's to check. The
    message is the build's (``rlrun.envs.ids``, which imports no torch).
    """
    try:
        env = OmegaConf.to_container(cfg.env, resolve=True) if OmegaConf.is_dict(cfg.get("env")) else {}
    except Exception:  # an interpolation that fails: validation reports it with the key
        return
    env_id = env.get("id")
    if (env.get("name") != "gym" or env.get("backend", "gymnasium") != "gymnasium" or env.get("imports")
            or not isinstance(env_id, str) or ":" in env_id):
        return
    from rlrun.envs.ids import check_registered

    check_registered(env_id)
