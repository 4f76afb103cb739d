"""One checked reader for every file rlrun saved and later reads back.

A saved file may come from elsewhere (a colleague's run, an archive, a cluster), so it is data
to be checked before use, in three steps, each refusing with one ``RlrunError`` (exit 2) that
names the file, the field and the fix:

1. bounded size: the file is read only if it is under its kind's byte limit;
2. bounded structure: YAML is *composed* into nodes first and refused if its aliases would
   expand past ``MAX_NODES`` nodes or nest deeper than ``MAX_DEPTH`` (an alias bomb of a few
   kB expands to billions of nodes once OmegaConf copies it) — before anything is constructed;
   only YAML's safe tags are accepted;
3. a schema: each field rlrun reads has a type, a range, and path components hold no
   separator or ``..``.

``torch.load`` runs with ``weights_only=True`` (no code runs); torch's own limits on the zip
archive apply, and the size bound keeps a file from claiming more than its kind holds.
"""

from __future__ import annotations

import json
import math
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from rlrun.core import formats
from rlrun.core.errors import RlrunError

MB = 2**20
# byte limits per kind: a policy file is a few hundred kB, a checkpoint with a replay buffer
# can hold several GB (checkpoint.max_buffer_mb), configs and summaries are small text.
LIMITS = {"checkpoint": 64 * 1024 * MB, "policy": 4 * 1024 * MB, "yaml": 16 * MB, "json": 64 * MB}
MAX_NODES = 50_000  # YAML nodes after alias expansion (a whole rlrun config: ~1,000)
MAX_DEPTH = 100  # YAML nesting (rlrun's configs: under 10)


class SavedFileError(RlrunError):
    """A saved file cannot be used: too large, not parseable, or a field of the wrong kind."""


def refuse(source: str | Path, what: str, field: str | None = None, fix: str | None = None,
           key: str = "path") -> SavedFileError:
    """The one-line error for ``source``: ``field`` (if any) and what is wrong, then the fix."""
    where = f"{source}: {field}" if field else str(source)
    return SavedFileError(f"{where} {what}", key=key,
                          fix=fix or "give a file written by rlrun (or delete this one to start afresh)")


def read_bytes(path: str | Path, kind: str, key: str = "path", fix: str | None = None) -> bytes:
    """The bytes of ``path``, refused if it is not a regular file or is over ``LIMITS[kind]``."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise refuse(path, "is not a regular file", fix=fix, key=key)
        if size > LIMITS[kind]:
            raise refuse(path, f"is {size / MB:.0f} MB, over the {LIMITS[kind] / MB:.0f} MB a {kind} "
                         "file may hold", fix=fix, key=key)
        with open(path, "rb") as f:
            return f.read(LIMITS[kind] + 1)
    except OSError as err:
        raise refuse(path, f"cannot be read ({err.strerror})", fix=fix, key=key) from None


def _text(data: bytes | str, source: str | Path, key: str, fix: str | None) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise refuse(source, f"is not UTF-8 text (byte {err.start})", fix=fix, key=key) from None


def _check_nodes(root: yaml.Node, source: str | Path, key: str, fix: str | None) -> None:
    """Refuses a composed document that would expand past ``MAX_NODES`` or ``MAX_DEPTH``.

    Counted once per distinct node with memoisation, so the count itself is linear in the
    file's size whatever the aliases multiply to.
    """
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}

    def walk(node: yaml.Node, on_path: frozenset[int]) -> tuple[int, int]:
        nid = id(node)
        if nid in sizes:
            return sizes[nid], depths[nid]
        if nid in on_path:  # a recursive alias: infinite once expanded
            raise refuse(source, "holds a recursive YAML alias", fix=fix, key=key)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
            seen: set[tuple[str, str]] = set()
            for k, _ in node.value:
                if isinstance(k, yaml.ScalarNode):
                    if (k.tag, k.value) in seen:  # which one counts differs between readers: refused
                        raise refuse(source, f"holds the key {k.value!r} twice in one mapping", fix=fix,
                                     key=key)
                    seen.add((k.tag, k.value))
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        total, deep = 1, 0
        inner = on_path | {nid}
        for child in children:
            n, d = walk(child, inner)
            total, deep = total + n, max(deep, d)
            if total > MAX_NODES:
                raise refuse(source, f"expands to over {MAX_NODES:,} YAML nodes (an alias bomb?)",
                             fix=fix, key=key)
        deep += 1
        if deep > MAX_DEPTH:
            raise refuse(source, f"nests YAML deeper than {MAX_DEPTH} levels", fix=fix, key=key)
        sizes[nid], depths[nid] = total, deep
        return total, deep

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * MAX_DEPTH + 200))
    try:
        walk(root, frozenset())
    except RecursionError:
        raise refuse(source, f"nests YAML deeper than {MAX_DEPTH} levels", fix=fix, key=key) from None
    finally:
        sys.setrecursionlimit(limit)


class _DepthLimitedLoader(yaml.SafeLoader):
    """SafeLoader whose composer refuses nesting past ``MAX_DEPTH`` while composing (a deep
    document would otherwise exhaust Python's recursion inside the composer)."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH + 1:
                raise yaml.YAMLError(f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


# YAML 1.1 reads "1e-3" as a string; OmegaConf, which wrote these files, reads it as a float.
_FLOAT = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X)
_DepthLimitedLoader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:float"]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_DepthLimitedLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def parse_yaml(data: bytes | str, source: str | Path, key: str = "path", fix: str | None = None) -> Any:
    """YAML text as plain Python values, bounded before anything is constructed."""
    text = _text(data, source, key, fix)
    if len(text) > LIMITS["yaml"]:
        raise refuse(source, f"holds {len(text) / MB:.0f} MB of YAML, over {LIMITS['yaml'] / MB:.0f} MB",
                     fix=fix, key=key)
    loader = None
    try:
        loader = _DepthLimitedLoader(text)  # its reader refuses NUL and other control bytes here
        root = loader.get_single_node()
        if root is None:
            return None
        _check_nodes(root, source, key, fix)
        return loader.construct_document(root)
    except yaml.YAMLError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise refuse(source, f"is not plain YAML ({first[:160]})", fix=fix, key=key) from None
    except RecursionError:
        raise refuse(source, f"nests YAML deeper than {MAX_DEPTH} levels", fix=fix, key=key) from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml(path: str | Path, key: str = "path", fix: str | None = None) -> Any:
    """``parse_yaml`` of a file, size-bounded first."""
    return parse_yaml(read_bytes(path, "yaml", key, fix), path, key, fix)


def load_json(path: str | Path, key: str = "path", fix: str | None = None) -> Any:
    """A JSON file, size-bounded, nesting-bounded (json's own recursion limit), NaN-free."""
    text = _text(read_bytes(path, "json", key, fix), path, key, fix)

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        twice = next((k for k in keys if keys.count(k) > 1), None)
        if twice is not None:  # which one counts differs between readers: refused, not guessed
            raise ValueError(f"the key {twice!r} appears twice in one object")
        return dict(pairs)

    try:
        return json.loads(text, parse_constant=no_constant, object_pairs_hook=no_duplicates)
    except (ValueError, RecursionError) as err:
        raise refuse(path, f"is not JSON ({str(err)[:160]})", fix=fix, key=key) from None


def load_summary(path: str | Path, key: str = "path", fix: str | None = None) -> dict[str, Any]:
    """A run's ``summary.json``: a JSON object, brought to today's summary format (one without a
    version was written before summaries had one)."""
    data = check_fields(load_json(path, key, fix), {}, path, key=key, fix=fix)
    try:
        return formats.upgrade("summary", data, path, key=key)
    except formats.FormatError as err:
        raise SavedFileError(err.message, key=key, fix=fix or err.fix) from None


def load_torch(path: str | Path, kind: str, key: str = "path", fix: str | None = None) -> Any:
    """``torch.load(weights_only=True)`` of a size-bounded file; any failure is one line."""
    import torch

    try:
        size = Path(path).stat().st_size
    except OSError as err:
        raise refuse(path, f"cannot be read ({err.strerror})", fix=fix, key=key) from None
    if not Path(path).is_file():
        raise refuse(path, "is not a regular file", fix=fix, key=key)
    if size > LIMITS[kind]:
        raise refuse(path, f"is {size / MB:.0f} MB, over the {LIMITS[kind] / MB:.0f} MB a {kind} "
                     "file may hold", fix=fix, key=key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.load(path, map_location="cpu", weights_only=True)


# ---- schema ---------------------------------------------------------------------------------

Check = Callable[[Any], str | None]  # None: fine; else what is wrong


def integer(low: int | None = 0, high: int | None = None) -> Check:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not _is_int(v):
            return f"must be an integer, got {_show(v)}"
        v = int(v)
        if (low is not None and v < low) or (high is not None and v > high):
            return f"must be in [{low}, {'inf' if high is None else high}], got {v}"
        return None
    return check


def number(finite: bool = True) -> Check:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"must be a number, got {_show(v)}"
        if finite and not math.isfinite(v):
            return f"must be a finite number, got {v}"
        return None
    return check


def kind(*types: type, name: str) -> Check:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) and bool not in types:
            return f"must be {name}, got {_show(v)}"
        return None if isinstance(v, types) else f"must be {name}, got {_show(v)}"
    return check


def path_component() -> Check:
    """A single directory or file name: text or integer, no separator, no ``..``, no NUL."""
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            return f"must be a name or number, got {_show(v)}"
        s = str(v)
        if not s or s in (".", "..") or "/" in s or "\\" in s or "\0" in s or ".." in s:
            return f"must be one path component (no '/', '..' or NUL), got {s[:60]!r}"
        return None
    return check


def _is_int(v: Any) -> bool:
    if isinstance(v, int):
        return True
    try:  # a 0-d integer tensor or numpy integer
        import torch

        return (isinstance(v, torch.Tensor) and v.ndim == 0 and not v.is_floating_point()
                and not v.is_complex())
    except ImportError:
        return False


def _show(v: Any) -> str:
    text = repr(v)
    return f"{type(v).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def check_fields(data: Any, schema: dict[str, tuple[Check, bool]], source: str | Path, key: str = "path",
                 fix: str | None = None, what: str = "a mapping") -> dict[str, Any]:
    """``data`` as a dict whose fields pass ``schema`` (``field: (check, required)``)."""
    if not isinstance(data, dict):
        raise refuse(source, f"must hold {what}, got {_show(data)}", fix=fix, key=key)
    for field, (check, required) in schema.items():
        if field not in data or data[field] is None:
            if required:
                raise refuse(source, "is missing", field=field, fix=fix, key=key)
            continue
        wrong = check(data[field])
        if wrong:
            raise refuse(source, wrong, field=field, fix=fix, key=key)
    return data
