"""Configs read from files are data: what a loaded config may and may not make rlrun do.

A ``checkpoint.pt``, ``policy.pt`` or ``config.yaml`` can come from anyone (a tracking server,
a colleague, a download). rlrun rebuilds a run from such a config through its registry only:

- ``_target_`` (and Hydra's other instantiate keys) anywhere in it would import and call any
  callable (``os.system``): refused, and the registry itself refuses ``_target_`` while an
  untrusted config is being built (``untrusted()``), so a loader that forgot the check is covered;
- ``${...}`` interpolations: rlrun writes configs resolved, so a loaded one has none; a resolver
  such as ``${oc.env:AWS_SECRET}`` would read the loader's environment into the run: refused;
- ``env.imports`` and ``env.id=module:Name-v0`` import a module (its top level runs): refused.

``trust_code=True`` (``rlrun.load(path, trust_code=True)``, ``rlrun eval PATH trust_code=true``,
``rlrun export PATH --trust-code``) accepts them and says first what will be imported. Configs the
user writes on the command line are the user's own and keep the ``_target_`` escape hatch.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from rlrun.errors import CheckpointError

# Hydra's instantiate keys: each one makes a node call or import something.
CODE_KEYS = ("_target_", "_partial_", "_args_", "_call_", "_recursive_", "_convert_")

_untrusted: contextvars.ContextVar[str | None] = contextvars.ContextVar("rlrun_untrusted", default=None)


@contextlib.contextmanager
def untrusted(source: str) -> Iterator[None]:
    """While active, the registry refuses ``_target_`` nodes (``registry.resolve_factory``)."""
    token = _untrusted.set(source)
    try:
        yield
    finally:
        _untrusted.reset(token)


def untrusted_source() -> str | None:
    """The file being rebuilt from when inside ``untrusted()``, else None."""
    return _untrusted.get()


def code_paths(node: Any, prefix: str = "") -> list[tuple[str, str]]:
    """``(key, what)`` for every place in a config container that would run code or read the
    environment: instantiate keys, interpolations, env module imports."""
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if str(k) in CODE_KEYS:
                found.append((key, f"{k} {v!r}"))
            found += code_paths(v, key)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += code_paths(v, f"{prefix}[{i}]")
    elif isinstance(node, str) and "${" in node:
        found.append((prefix, f"the interpolation {node[:80]!r}"))
    if not prefix and isinstance(node, dict) and isinstance(node.get("env"), dict):
        env = node["env"]
        for i, module in enumerate(env.get("imports") or []):
            found.append((f"env.imports[{i}]", f"an import of module {module!r}"))
        env_id = env.get("id")
        if isinstance(env_id, str) and ":" in env_id:
            found.append(("env.id", f"an import of module {env_id.split(':')[0]!r}"))
    return found


def check_loaded(cfg: DictConfig | ListConfig | dict, source: str, trust_code: bool = False) -> None:
    """Refuses a config read from ``source`` that would run code, unless ``trust_code``.

    Raises:
        CheckpointError: naming the first offending key and what it would do.
    """
    raw = OmegaConf.to_container(cfg, resolve=False) if OmegaConf.is_config(cfg) else cfg
    found = code_paths(raw)
    if not found:
        return
    if trust_code:
        for key, what in found:
            print(f"[rlrun] trust_code: {source} runs {what} ({key})", file=sys.stderr, flush=True)
        return
    key, what = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    raise CheckpointError(
        f"the config saved in {source} asks for {what}{more}; rlrun builds loaded configs from "
        "registered components only", key=key,
        fix="load only files you trust with trust_code (rlrun.load(path, trust_code=True), "
        "rlrun eval PATH trust_code=true, rlrun export PATH --trust-code)")
