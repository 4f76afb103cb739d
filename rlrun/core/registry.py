"""The component registry: ``kind/name -> factory``.

Every config group option names a registered factory (``name: ppo``); rlrun
builds it with the remaining keys as keyword arguments, checked against the
factory's signature so that a typo or a wrong type is reported with the key.
Third-party packages register components through the ``rlrun.components``
entry-point group; ``_target_: pkg.module.callable`` is the escape hatch for
anything unregistered.

Examples:
    >>> from rlrun.core.registry import register, build
    >>> @register("hook", "print_frames")
    ... def print_frames(every: int = 1000):
    ...     "Prints the frame counter."
    ...     ...
    >>> hook = build("hook", {"name": "print_frames", "every": 10})
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import importlib
import inspect
import math
import pkgutil
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Annotated, Any, Literal

from omegaconf import DictConfig, ListConfig, OmegaConf

from rlrun.core.errors import ConfigError, did_you_mean

KINDS = ("env", "model", "collector", "buffer", "loss", "optim", "hook", "logger", "exploration")
ENTRY_POINT_GROUP = "rlrun.components"


@dataclass(frozen=True)
class Entry:
    """A registered component and what it declared at ``register``.

    Attributes:
        config_check: ``check(options, key)`` run when the config is checked (``run_check``).
        check_options: ``check_options(node, key)``: rules between its options (``check_kwargs``).
        agent_layouts: What it handles: ``"single"`` and/or ``"group"`` (``rlrun.core.agent_groups``).
    """

    kind: str
    name: str
    factory: Callable[..., Any]
    config_check: Callable[[dict, str], Any] | None = None
    check_options: Callable[[dict, str], None] | None = None
    agent_layouts: tuple[str, ...] = ("single",)

    @property
    def summary(self) -> str:
        """The docstring's first paragraph, on one line."""
        doc = (inspect.getdoc(self.factory) or "").strip()
        return " ".join(doc.split("\n\n")[0].split())


_REGISTRY: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}
_BY_FACTORY: dict[Callable, Entry] = {}  # the entry of each registered factory (its declarations)
_loaded = False


def register(kind: str, name: str, check: Callable[[dict, str], Any] | None = None,
             options: Callable[[dict, str], None] | None = None,
             layouts: tuple[str, ...] | None = None) -> Callable[[Callable], Callable]:
    """Decorator registering ``factory`` as ``kind/name``, with what it declares kept on its ``Entry``.

    ``check(options, key)``, if given, runs when the config is checked (before anything is
    built) with the node's options over the factory's defaults: it raises ``ConfigError`` for
    what a signature cannot say (an env constructor's keywords) and may return a ``Footprint``.
    ``options(node, key)``: rules between the node's options, run with the signature's checks
    (a class may declare it as its ``check_options`` method). ``layouts``: the agent layouts it
    handles (a class may declare them as its ``agent_layouts`` attribute; default ``("single",)``).
    """
    if kind not in _REGISTRY:
        raise ValueError(f"unknown component kind {kind!r}; kinds are {', '.join(KINDS)}")

    def deco(factory: Callable) -> Callable:
        declared = getattr(factory, "check_options", None) if inspect.isclass(factory) else None
        entry = Entry(kind, name, factory, check, options or declared,
                      tuple(layouts or (getattr(factory, "agent_layouts", None) if inspect.isclass(factory)
                                        else None) or ("single",)))
        _REGISTRY[kind][name] = _BY_FACTORY[factory] = entry
        return factory

    return deco


def entry_of(factory: Callable) -> Entry | None:
    """The registry entry of ``factory`` (None for a ``_target_`` one, which declares nothing)."""
    return _BY_FACTORY.get(factory)


@dataclass(frozen=True)
class Footprint:
    """What a component's copies hold in memory, for the config-time memory check.

    Attributes:
        count: Number of copies (sub-envs), set by ``count_key``.
        each_bytes: Lower bound of one copy's own memory.
        transition_bytes: Bytes of one stored transition of one copy (observation, next
            observation, action); or a callable computing them, when that means making one env.
    """

    count: int
    count_key: str
    each_bytes: int
    transition_bytes: int | Callable[[], int]


def run_check(factory: Callable, node: dict, key: str) -> Any:
    """Runs the factory's registered config check on ``node`` (over its defaults), if it has one."""
    entry = entry_of(factory)
    check = entry.config_check if entry is not None else None
    if check is None:
        return None
    defaults = {n: p.default for n, p in inspect.signature(factory).parameters.items()
                if p.default is not p.empty}
    return check({**defaults, **node}, key)


# rlrun's own component modules, named as data and imported on the first lookup, as third-party
# entry points are: the factories import this module, so it imports none of them (no import circle).
# Every module of a package in BUILTIN_PACKAGES registers (adding an algorithm edits no list).
BUILTIN_PACKAGES = ("rlrun.algos",)
BUILTIN_MODULES = (
    "rlrun.collectors.sync", "rlrun.collectors.vmas", "rlrun.collectors.multiprocess",
    "rlrun.collectors.ray_actors", "rlrun.modules.exploration", "rlrun.collectors.dataset",
    "rlrun.loggers.tracking", "rlrun.buffers.factory",
    "rlrun.envs.atari", "rlrun.envs.envpool", "rlrun.envs.gym", "rlrun.envs.vmas", "rlrun.launch.pruning",
    "rlrun.loggers.wandb", "rlrun.modules.cnn", "rlrun.modules.group_models", "rlrun.modules.models",
    "rlrun.trainer.hooks", "rlrun.trainer.optim",
)


def _load_all() -> None:
    """Imports rlrun's own component modules and the third-party entry points."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for package in BUILTIN_PACKAGES:
        for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
            importlib.import_module(f"{package}.{module.name}")
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        ep.load()


def entries(kind: str | None = None) -> list[Entry]:
    """Every registered component, optionally of one kind, sorted by kind and name."""
    _load_all()
    kinds = [kind] if kind else list(_REGISTRY)
    return [e for k in kinds for _, e in sorted(_REGISTRY[k].items())]


def lookup(kind: str, name: str, key: str | None = None) -> Entry:
    """Returns the entry for ``kind/name`` or raises a ConfigError listing the known names."""
    _load_all()
    known = _REGISTRY[kind]
    if name not in known:
        raise ConfigError(
            f"unknown {kind} {name!r}.{did_you_mean(str(name), known)}",
            key=key or f"{kind}.name",
            fix=f"use one of: {', '.join(sorted(known))} (see `rlrun list {kind}`)",
        )
    return known[name]


def _import_target(path: str, key: str) -> Callable:
    module, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(
            f"cannot import _target_ {path!r} ({err})",
            key=f"{key}._target_",
            fix="give an importable 'package.module.callable' path",
        ) from None


_untrusted: contextvars.ContextVar[str | None] = contextvars.ContextVar("rlrun_untrusted", default=None)


@contextlib.contextmanager
def untrusted(source: str) -> Iterator[None]:
    """While active, ``_target_`` nodes are refused: the config being built was read from
    ``source`` (a file), and a loaded config builds registered components only."""
    token = _untrusted.set(source)
    try:
        yield
    finally:
        _untrusted.reset(token)


def resolve_factory(kind: str, node: dict, key: str) -> tuple[Callable, dict]:
    """The factory a component node names (``name`` or ``_target_``) and the node's other keys."""
    node = dict(node)
    if "_target_" in node:
        source = _untrusted.get()
        if source is not None:  # a config read from a file: data, never an import path
            raise ConfigError(f"the config saved in {source} names _target_ {node['_target_']!r}; "
                              "loaded configs build registered components only", key=f"{key}._target_",
                              fix="load only files you trust with trust_code=true")
        factory = _import_target(node.pop("_target_"), key)
        node.pop("name", None)
        return factory, node
    if "name" not in node:
        raise ConfigError(f"no component named for {kind}", key=f"{key}.name",
                          fix=f"set {key}.name to a registered {kind} or give {key}._target_")
    return lookup(kind, node.pop("name"), key=f"{key}.name").factory, node


def build(kind: str, cfg: Mapping | DictConfig, key: str | None = None, **extra: Any) -> Any:
    """Builds a component from its config node.

    Args:
        kind: Component kind (one of ``KINDS``).
        cfg: Node with ``name`` (registered) or ``_target_`` (import path) plus
            keyword arguments for the factory.
        key: Dotted config path of the node, used in error messages.
        **extra: Objects the caller supplies (env specs, modules, ...); they are
            passed only if the factory accepts them.
    """
    key = key or kind
    node = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    if "name" in node and "_target_" not in node:
        extra = {"registered_as": node["name"], **extra}
    factory, node = resolve_factory(kind, node, key)
    params = inspect.signature(factory).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    supplied = {k: v for k, v in extra.items() if takes_any or k in params}
    for k in node:
        if k in supplied:  # rlrun passes these in: a config value here would be silently overridden
            raise ConfigError(f"{k!r} is not set here", key=f"{key}.{k}",
                              fix=SUPPLIED_FIX.get(k, f"remove {key}.{k}: rlrun supplies it"))
    kwargs = check_kwargs(factory, node, key, hidden=set(supplied))
    kwargs.update(supplied)
    for name, p in params.items():  # a required option deleted from the config (~key): say which
        required = p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        if required and name not in kwargs:
            raise ConfigError("is required but not set", key=f"{key}.{name}", fix=f"set {key}.{name}=...")
    component = factory(**kwargs)
    check_protocol(kind, component, key)
    return component


def check_protocol(kind: str, component: Any, key: str) -> None:
    """Raises ``ConfigError`` if a built component lacks a member of its kind's protocol
    (``rlrun.core.contracts.PROTOCOLS``): a plugin learns what is missing when it is built, not
    from an ``AttributeError`` mid-run."""
    from rlrun.core.contracts import PROTOCOLS, missing_members  # contracts imports torch: only when building

    protocol = PROTOCOLS.get(kind)
    missing = missing_members(component, protocol) if protocol is not None else []
    if missing:
        name = type(component).__name__
        raise ConfigError(f"the {kind} {name} lacks {', '.join(missing)}, which rlrun.core.contracts."
                          f"{protocol.__name__} requires", key=key,
                          fix=f"add {', '.join(missing)} to {name} "
                          f"(see rlrun.core.contracts.{protocol.__name__})")


# Where to set what rlrun passes to factories instead of the component's own node.
SUPPLIED_FIX = {
    "gamma": "the discount is one top-level key for every algorithm: set gamma=... instead",
    "seed": "set the top-level seed=... instead",
    "total_frames": "set the top-level total_frames=... instead",
    "device": "set the top-level device=... instead",
    "registered_as": "pick the component with name=... instead",
}


def check_kwargs(factory: Callable, node: dict, key: str, hidden: set[str] = frozenset()) -> dict:
    """Checks config keys and value types against ``factory``'s signature, then the rules between
    its options that a signature cannot state, if its entry declares them (``register(options=...)``).

    ``hidden``: parameters rlrun supplies, left out of the options an error lists.
    """
    sig = inspect.signature(factory)
    params = sig.parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        for name in node:
            if name not in params:
                raise ConfigError(
                    f"unknown option {name!r}.{did_you_mean(name, params)}",
                    key=f"{key}.{name}",
                    fix=f"valid options are: {', '.join(p for p in params if p not in ('self', *hidden))}",
                )
    try:
        hints = typing.get_type_hints(factory.__init__ if inspect.isclass(factory) else factory,
                                      include_extras=True)
    except Exception:  # unresolvable annotations: skip type checks rather than fail
        hints = {}
    for name, value in node.items():
        if name in hints:
            node[name] = check_value(value, hints[name], f"{key}.{name}",
                                     params[name].default if name in params else inspect.Parameter.empty)
    entry = entry_of(factory)
    if entry is not None and entry.check_options is not None:  # rules between options, declared at register
        entry.check_options(node, key)
    return node


def check_value(value: Any, hint: Any, key: str, default: Any = inspect.Parameter.empty) -> Any:
    """Checks one config value against its annotation (``_coerce``); the fix names the default."""
    try:
        return _coerce(value, hint, key)
    except ConfigError as err:
        if default is inspect.Parameter.empty or default is dataclasses.MISSING or err.fix is None:
            raise
        raise ConfigError(err.message, key=err.key, fix=f"{err.fix} (default: {_yaml(default)})") from None


@dataclass(frozen=True)
class Range:
    """A bound on a number, declared in an annotation: ``Annotated[float, Range(gt=0)]``.

    Floats are always checked to be finite (no nan or inf) as well.
    """

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    def holds(self, v: float) -> bool:
        return ((self.gt is None or v > self.gt) and (self.ge is None or v >= self.ge)
                and (self.lt is None or v < self.lt) and (self.le is None or v <= self.le))

    def describe(self) -> str:
        parts = [f"{op} {_num(b)}" for op, b in ((">", self.gt), (">=", self.ge), ("<", self.lt),
                                                 ("<=", self.le)) if b is not None]
        return " and ".join(parts)


PositiveInt = Annotated[int, Range(gt=0)]
NonNegativeInt = Annotated[int, Range(ge=0)]
PositiveFloat = Annotated[float, Range(gt=0)]
NonNegativeFloat = Annotated[float, Range(ge=0)]
Fraction = Annotated[float, Range(ge=0, le=1)]
# A soft target-update rate (polyak tau): 1 copies the online network, 0 would never move it.
Rate = Annotated[float, Range(gt=0, le=1)]


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def describe(hint: Any) -> str:
    """A type annotation in the words of an error message: ``a positive integer``, ``one of a, b``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        base, ranges = args[0], [m for m in args[1:] if isinstance(m, Range)]
        if not ranges:
            return describe(base)
        r = ranges[0]
        if base is int and r == Range(gt=0):
            return "a positive integer"
        if base is int and r == Range(ge=0):
            return "a non-negative integer"
        return f"{'an integer' if base is int else 'a number'} {r.describe()}"
    if origin is Literal:
        return "one of " + ", ".join(_yaml(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        words = [w for a in args for w in _words(a)]
        return f"{', '.join(words[:-1])} or {words[-1]}"
    if origin in (list, tuple, typing.Sequence) or hint in (list, tuple):
        return "a list"
    if origin is dict or hint is dict:
        return "a mapping"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string",
            type(None): "null"}.get(hint, getattr(hint, "__name__", str(hint)))


def _words(hint: Any) -> list[str]:
    """The options of one arm of a union, for ``a, b or c``."""
    if hint is bool:
        return ["true", "false"]
    if typing.get_origin(hint) is Literal:
        return [_yaml(v) for v in typing.get_args(hint)]
    return [describe(hint)]


def _yaml(v: Any) -> str:
    """``v`` as written in a config: true, false, null, 3e-4, auto."""
    if v is None or isinstance(v, bool):
        return {None: "null", True: "true", False: "false"}[v]
    return str(v)


_SIMPLE = (int, float, bool, str)


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """Validates ``value`` against an annotation; returns it, converted where that is lossless.

    Understands int, float (finite only), bool, str, lists, dicts, ``Optional``
    and other unions, ``Literal`` and ``Annotated[..., Range(...)]``.
    """
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin is Annotated:
        base, *meta = typing.get_args(hint)
        try:
            value = _coerce(value, base, key)
        except ConfigError:
            raise _bad(value, hint, key) from None
        if any(isinstance(m, Range) and not m.holds(value) for m in meta):
            raise _bad(value, hint, key)
        return value
    if origin is Literal:
        for option in typing.get_args(hint):
            if value == option and type(value) is type(option):
                return value
        raise _bad(value, hint, key)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return value
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                pass
        raise _bad(value, hint, key)
    if origin in (list, tuple, typing.Sequence) or hint in (list, tuple):
        if not isinstance(value, (list, tuple, ListConfig)):
            raise ConfigError(f"expected a list, got {value!r}", key=key,
                              fix=f"write a list, e.g. {key}=[64,64]")
        (inner,) = typing.get_args(hint)[:1] or (Any,)
        return [_coerce(v, inner, key) for v in value]
    if origin is dict or hint is dict:
        if not isinstance(value, (dict, DictConfig)):
            raise _bad(value, hint, key)
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if hint in (int, float) and isinstance(value, str):
        try:  # YAML 1.1 reads "3e-4" as a string; accept numbers written that way
            number = float(value)
            value = int(number) if hint is int and number.is_integer() else number
        except ValueError:
            pass
    if hint in _SIMPLE:
        if isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
            if hint is float and not math.isfinite(value):
                raise ConfigError(f"must be a finite number, got {value!r}", key=key,
                                  fix=f"set {key} to a finite number (not nan or inf)")
            return value
        example = {int: "an integer, e.g. 1000", float: "a number, e.g. 3e-4",
                   bool: "true or false", str: "a string"}[hint]
        raise ConfigError(f"expected {hint.__name__}, got {value!r}", key=key,
                          fix=f"set {key} to {example}")
    return value


def _bad(value: Any, hint: Any, key: str) -> ConfigError:
    what = describe(hint)
    return ConfigError(f"must be {what}, got {value!r}", key=key, fix=f"set {key} to {what}")
