"""The ``rlrun`` command: Hydra entry point, component listing, clear errors.

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
import hashlib
import logging
import os
import re
import signal
import sys
import tempfile
from importlib.resources import files
from pathlib import Path
from typing import NoReturn

from omegaconf import OmegaConf

from rlrun import __version__
from rlrun.errors import ConfigError, RlrunError, did_you_mean
from rlrun.rundir import git_commit
from rlrun.signals import exit_code

CONF_DIR = Path(str(files("rlrun.conf")))
SWEEPS_DIR = Path(str(files("rlrun.sweeps")))  # on Hydra's search path through rlrun's plugin
_NOT_FOUND = object()
MAX_KEY_LEN = 200  # the longest real key is under 60 characters
PROBE_BYTES = 64 * 1024  # room the run directory must have at start: Hydra's and rlrun's config files


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
    ``rlrun.confighash.RUN_NAME_EXCLUDED`` leaves out of the run's name (Hydra compares exactly,
    so the list is made per command from the one list of prefixes)."""
    from rlrun.confighash import run_name_excluded

    keys = [o.lstrip("~+").partition("=")[0].partition("@")[0] for o in task_overrides]
    return run_name_excluded(keys)


def register_resolvers() -> None:
    for name, fn in (("rlrun_run_name", _run_name), ("ceil_div", _ceil_div), ("rlrun_env_name", env_name),
                     ("rlrun_run_name_excluded", _run_name_excluded)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


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
    from rlrun.component_index import summaries
    from rlrun.registry import KINDS

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


def precheck(args: list[str], hydra=None):
    """Reports unknown presets and misspelt keys with a fix, before Hydra composes.

    With ``hydra`` (a single run, ``hydra._internal.hydra.Hydra``), the run's config is composed
    here, once, and returned (None when that fails without one of these errors: Hydra then
    reports it): composing takes 0.3-0.6 s, and Hydra's own path composes three times.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType

    overrides = [a for a in args if not a.startswith("-") and ("=" in a or a.startswith("~"))]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as err:
        raise ConfigError(f"cannot parse overrides: {err}",
                          fix="write overrides as key=value, e.g. seed=1") from None
    for o in parsed:  # a long key would reach the file system as a config group name (OSError 36)
        key = o.key_or_group
        if len(key) > MAX_KEY_LEN:
            raise ConfigError(f"override key of {len(key)} characters", key=f"{key[:40]}...",
                              fix="config keys are short names: check the override (see `rlrun --cfg job`)")
    _check_writable(parsed, multirun=any(a in ("-m", "--multirun") for a in args))
    groups = config_groups()
    group_overrides, value_overrides, edit_overrides = [], [], []
    for o in parsed:
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
                group_overrides.append(o.input_line)
        elif o.is_add() or o.is_delete():
            edit_overrides.append(o)
        elif not o.is_force_add():
            value_overrides.append(o)
    if hydra is not None:
        from rlrun.launch.single import compose_run

        composed = compose_run(hydra, overrides)
        if composed is not None:  # every override applied: the keys exist; only ${refs} are left
            from rlrun.launch.single import check_env_id

            _check_refs(parsed, composed)
            check_env_id(composed)
            return composed
    if hydra is not None:  # composing failed: compose the presets alone to name the mistake
        from hydra.types import RunMode

        cfg = hydra.compose_config("config", group_overrides, run_mode=RunMode.RUN, from_shell=False)
    else:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides=group_overrides, return_hydra_config=True)
    for o in value_overrides:
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
    for o in edit_overrides:  # Hydra refuses these too, but in 4 lines and with exit 1
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
    _check_refs(parsed, cfg)
    return None


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
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path) as probe:  # bytes, not just a name: a full disk fails here,
            probe.write(bytes(PROBE_BYTES))             # not in Hydra's own writes (a traceback)
            probe.flush()
    except OSError as err:
        where = f"{path}" if given else f"runs/ in the current directory {Path.cwd()}"
        raise ConfigError(f"cannot write the run directory {where} ({err.strerror or err})", key=key,
                          fix=f"set {key}=<a writable directory>" + ("" if given else
                              ", or run rlrun from a writable directory")) from None


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


def _versions(env_id: str | None) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    packages = ["torch", "tensordict", "gymnasium", *([p] if env_id and (p := env_package(env_id)) else [])]
    out = {"rlrun_version": __version__}
    for pkg in packages:
        try:
            out[f"version.{pkg}"] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def run_tags(hc, cfg=None) -> dict[str, str]:
    """Tags identifying and reproducing a run: presets (the env's after ``env.id``), config hash,
    versions (rlrun, torch, tensordict, gymnasium, the env's package), the git commit of the
    directory it was launched from (and rlrun's own when rlrun is a checkout), sweep and job
    number, SLURM job."""
    from hydra.types import RunMode

    from rlrun.confighash import config_hash

    choices = hc.runtime.choices
    env_id = cfg.get("env", {}).get("id") if cfg is not None else None
    tags = {"algo": str(choices.get("algo", "")), "env": env_name(str(choices.get("env", "")), env_id),
            **_versions(env_id)}
    if cfg is not None:
        from rlrun.run import flatten

        tags["config_hash"] = config_hash(flatten(OmegaConf.to_container(cfg, resolve=True)))
    if hc.mode == RunMode.MULTIRUN:
        tags["sweep"] = Path(hc.sweep.dir).name
        tags["job_num"] = str(hc.job.num)
        tags["overrides"] = hc.job.override_dirname
        if cfg is not None and "logger" in cfg:  # under the sweep's parent run (rlrun.launch.sweep_group)
            from rlrun.launch.sweep_group import job_tags

            tags.update(job_tags(str(hc.sweep.dir), OmegaConf.to_container(cfg.logger, resolve=True),
                                 hc.runtime.cwd))
    user, own = git_commit(hc.runtime.cwd), git_commit()
    if user:
        tags["git_commit"] = user
    if own and own != user:
        tags["rlrun_git_commit"] = own
    for var, tag in (("SLURM_JOB_ID", "slurm_job_id"), ("SLURM_ARRAY_JOB_ID", "slurm_array_job_id"),
                     ("SLURM_ARRAY_TASK_ID", "slurm_array_task_id")):
        if var in os.environ:
            tags[tag] = os.environ[var]
    return tags


def _task(cfg) -> None:
    from hydra.core.hydra_config import HydraConfig

    _prestart_tracker(cfg)  # before torch: MLflow opens its store on another core meanwhile
    from rlrun.run import train

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    # A log file that stops taking bytes (a full disk) must not print logging's own traceback
    # per message: the run's next write of its own files fails as one clean error.
    logging.raiseExceptions = False
    try:
        try:
            summary = train(cfg, run_dir, run_tags(hc, cfg))
        finally:  # a run that ended before making its logger leaves its worker unused
            from rlrun.record.remote import discard_prestarted

            discard_prestarted()
    except KeyboardInterrupt as stop:  # Ctrl-C pressed twice, or once before training started
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(_interrupted(stop, run_dir), file=sys.stderr, flush=True)
        _exit_promptly(128 + signal.SIGINT)
    except (RlrunError, OSError) as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        if isinstance(err, OSError):  # a write outside checkpoint.atomic_write (a logger's file)
            from rlrun.checkpoint import write_error

            failed = write_error(err, err.filename or run_dir)
            if failed is None:
                raise
            err = failed
        print(f"rlrun: error: {err.render()}", file=sys.stderr)
        sys.exit(err.exit_code)
    from rlrun.tracking import say

    ret = summary.get("eval/episode_return")
    code = exit_code(summary)
    if code:  # stopped by a signal, checkpoint written: 128 + signal (130 Ctrl-C, 143 SIGTERM)
        print(f"[rlrun] interrupted ({summary.get('stop_reason')}) at {summary['frames']}/"
              f"{summary['total_frames']} frames, checkpoint written; rerun the same command to "
              f"continue -> {summary['run_dir']}", file=sys.stderr, flush=True)
        _exit_promptly(code)
    say(f"[rlrun] {summary['status']}: {summary['frames']} frames, eval return "
        f"{'n/a' if ret is None else f'{ret:.2f}'}, {summary['wall_time_s']:.1f} s -> {summary['run_dir']}")
    if summary["status"] == "diverged":
        from rlrun.use import CHECKPOINT

        kept = Path(summary["run_dir"]) / CHECKPOINT
        # say what is true: a run that diverged before its first checkpoint has none to keep
        where = (f"the last finite checkpoint is kept in {kept}" if kept.is_file() else
                 "it diverged before its first checkpoint, so none was written (a rerun starts afresh)")
        print(f"rlrun: error: the run diverged: {summary['stop_reason'].removeprefix('diverged: ')}\n"
              f"  fix: lower optim.lr (or add optim.max_grad_norm); {where}", file=sys.stderr)
        sys.exit(3)


def _prestart_tracker(cfg) -> None:
    """Starts MLflow's worker process (``rlrun.record.remote``) for an ``mlflow`` logger node."""
    try:
        logger = cfg.get("logger")
        node = OmegaConf.to_container(logger, resolve=True) if OmegaConf.is_dict(logger) else {}
    except Exception:  # an interpolation that fails: the run's validation reports it
        return
    from rlrun.record.remote import prestart

    prestart(node)


def _exit_promptly(code: int) -> NoReturn:
    """Exits with ``code`` once a stopped run is closed, without the interpreter's final
    garbage collections over torch's and Hydra's module graphs.

    Those take seconds (4.7 s from the last line to the prompt on this project's 2-core
    machine, 1.3 s this way), while a user who pressed Ctrl-C waits for the prompt. The
    run's garbage is collected here first, so its finalisers still run; only what lives
    until exit anyway (modules) is frozen and left to the OS.
    """
    # The run is closed and its line printed: a Ctrl-C now could only raise inside a finaliser
    # that the collection runs ("Exception ignored ... KeyboardInterrupt") or turn 130 into a
    # death by the signal. The exit takes about a second.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.collect()
    gc.freeze()
    sys.exit(code)


def _interrupted(stop: KeyboardInterrupt, run_dir: Path | None = None) -> str:
    """The one line for a run stopped by Ctrl-C without its usual checkpoint-and-exit."""
    from rlrun.signals import StopNow

    where = f" -> {run_dir}" if run_dir is not None else ""
    if isinstance(stop, StopNow):
        return (f"[rlrun] interrupted ({signal.Signals(stop.signum).name} twice): stopped at once, without "
                f"a checkpoint of the batch in progress; rerun the same command to continue from the last "
                f"one{where}")
    return (f"[rlrun] interrupted (SIGINT); rerun the same command to continue from the last checkpoint, "
            f"if any{where}")


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
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C outside a training loop (set-up, eval, export, report): one line
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print("\n[rlrun] interrupted (SIGINT)", file=sys.stderr, flush=True)
        return 128 + signal.SIGINT


def _main(argv: list[str]) -> int:
    use_huge_pages_for_large_tensors()
    skip_the_final_garbage_collection()
    if argv[:1] == ["list"]:
        return list_components(argv[1:])
    if argv[:1] == ["explain"]:
        from rlrun.explain import main as explain_main

        return explain_main(argv[1:])
    if argv[:1] in (["eval"], ["export"]):
        from rlrun.evaluate import main as eval_main
        from rlrun.export import main as export_main

        return (eval_main if argv[0] == "eval" else export_main)(argv[1:])
    if argv[:1] == ["dataset"]:
        from rlrun.datasets.cli import main as dataset_main

        return dataset_main(argv[1:])
    if argv[:1] == ["report"]:
        from rlrun.report.cli import main as report_main

        return report_main(argv[1:])
    register_resolvers()
    info_only = any(a in ("--help", "-h", "--hydra-help", "--info", "-i", "--cfg", "-c",
                          "--shell-completion", "-sc") or a.startswith("--cfg") for a in argv)
    single = not info_only and _single_run(argv)
    if single:  # composed once, then run as Hydra.run would
        return _run_single(argv)
    if not info_only:
        try:
            precheck(argv)
        except RlrunError as err:
            return _config_error(err)
    return _run_hydra_main(argv)


def _config_error(err: RlrunError) -> int:
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise err
    print(f"rlrun: error: {err.render()}", file=sys.stderr)
    return err.exit_code


def _single_run(argv: list[str]) -> bool:
    """Only overrides, none of them Hydra's mode: one run, which ``_run_single`` composes once."""
    return all(not a.startswith("-") and not a.lstrip("+~").startswith("hydra.mode") for a in argv)


def _run_single(argv: list[str]) -> int:
    """A single run with its config composed once (``rlrun.launch.single``)."""
    from rlrun.launch.single import run_single

    return run_single(argv, _task, precheck, _config_error, _run_hydra_main, _interrupted)


def _run_hydra_main(argv: list[str]) -> int:
    import hydra

    hydra_main = hydra.main(version_base="1.3", config_path=str(CONF_DIR),
                            config_name="config")(_task)
    sys.argv = [sys.argv[0], *argv]
    try:
        hydra_main()
    except KeyboardInterrupt as stop:  # Ctrl-C while Hydra sets the run up: no traceback
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(_interrupted(stop), file=sys.stderr, flush=True)
        return 128 + signal.SIGINT
    return 0


if __name__ == "__main__":
    sys.exit(main())
