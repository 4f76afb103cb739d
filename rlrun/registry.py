"""The component registry: ``kind/name -> factory``.

Every config group option names a registered factory (``name: ppo``); rlrun
builds it with the remaining keys as keyword arguments, checked against the
factory's signature so that a typo or a wrong type is reported with the key.
Third-party packages register components through the ``rlrun.components``
entry-point group; ``_target_: pkg.module.callable`` is the escape hatch for
anything unregistered.

Examples:
    >>> from rlrun.registry import register, build
    >>> @register("hook", "print_frames")
    ... def print_frames(every: int = 1000):
    ...     "Prints the frame counter."
    ...     ...
    >>> hook = build("hook", {"name": "print_frames", "every": 10})
"""

from __future__ import annotations

import importlib
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from rlrun.errors import ConfigError, did_you_mean

KINDS = ("env", "model", "collector", "buffer", "loss", "optim", "hook", "logger", "exploration")
ENTRY_POINT_GROUP = "rlrun.components"


@dataclass(frozen=True)
class Entry:
    kind: str
    name: str
    factory: Callable[..., Any]

    @property
    def summary(self) -> str:
        """The docstring's first paragraph, on one line."""
        doc = (inspect.getdoc(self.factory) or "").strip()
        return " ".join(doc.split("\n\n")[0].split())


_REGISTRY: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}
_loaded = False


def register(kind: str, name: str) -> Callable[[Callable], Callable]:
    """Decorator registering ``factory`` as ``kind/name``."""
    if kind not in _REGISTRY:
        raise ValueError(f"unknown component kind {kind!r}; kinds are {', '.join(KINDS)}")

    def deco(factory: Callable) -> Callable:
        _REGISTRY[kind][name] = Entry(kind, name, factory)
        return factory

    return deco


def _load_all() -> None:
    """Imports rlrun's own component modules and the third-party entry points."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    importlib.import_module("rlrun.components")
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
    if "_target_" in node:
        factory = _import_target(node.pop("_target_"), key)
        node.pop("name", None)
    else:
        if "name" not in node:
            raise ConfigError(f"no component named for {kind}", key=f"{key}.name",
                              fix=f"set {key}.name to a registered {kind} or give {key}._target_")
        factory = lookup(kind, node.pop("name"), key=f"{key}.name").factory
    kwargs = check_kwargs(factory, node, key)
    params = inspect.signature(factory).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    kwargs.update({k: v for k, v in extra.items() if takes_any or k in params})
    return factory(**kwargs)


def check_kwargs(factory: Callable, node: dict, key: str) -> dict:
    """Checks config keys and value types against ``factory``'s signature."""
    sig = inspect.signature(factory)
    params = sig.parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        for name in node:
            if name not in params:
                raise ConfigError(
                    f"unknown option {name!r}.{did_you_mean(name, params)}",
                    key=f"{key}.{name}",
                    fix=f"valid options are: {', '.join(p for p in params if p != 'self')}",
                )
    try:
        hints = typing.get_type_hints(factory.__init__ if inspect.isclass(factory) else factory)
    except Exception:  # unresolvable annotations: skip type checks rather than fail
        hints = {}
    for name, value in node.items():
        if name in hints:
            node[name] = _coerce(value, hints[name], f"{key}.{name}")
    return node


_SIMPLE = (int, float, bool, str)


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """Validates ``value`` against simple annotations (int, float, bool, str, lists, unions)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return value
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError as err:
                errors.append(err)
        raise errors[0] if errors else ConfigError("bad value", key=key)
    if origin in (list, tuple, typing.Sequence) or hint in (list, tuple):
        if not isinstance(value, (list, tuple, ListConfig)):
            raise ConfigError(f"expected a list, got {value!r}", key=key,
                              fix=f"write a list, e.g. {key}=[64,64]")
        (inner,) = typing.get_args(hint)[:1] or (Any,)
        return [_coerce(v, inner, key) for v in value]
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float) and isinstance(value, str):
        try:  # YAML 1.1 reads "3e-4" as a string; accept numbers written that way
            number = float(value)
            value = int(number) if hint is int and number.is_integer() else number
        except ValueError:
            pass
    if hint in _SIMPLE:
        if isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
            return value
        example = {int: "an integer, e.g. 1000", float: "a number, e.g. 3e-4",
                   bool: "true or false", str: "a string"}[hint]
        raise ConfigError(f"expected {hint.__name__}, got {value!r}", key=key,
                          fix=f"set {key} to {example}")
    return value
