"""The shell blocks of the documentation site (``docs/``) and their test markers.

A ``bash`` block whose commands start with ``rlrun`` or ``torchrun`` carries a marker on the line
before it (``docs/development.md``, Documentation):

    <!-- test: run OVERRIDES -->     run every command, OVERRIDES appended to each training command
    <!-- test: compose (WHY) -->     compose every command with ``--cfg job`` instead
    <!-- test: skip (WHY) -->        not run, for the reason given
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # tests/helpers/ -> the repository
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
MARKER = re.compile(r"<!-- test: (run|compose|skip)\b(.*?)-->\s*$")
# rlrun's subcommands: not a training run, so no budget overrides
SUBCOMMANDS = {"list", "explain", "eval", "export", "report", "dataset"}


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    mode: str | None  # run, compose, skip; None: no marker
    arg: str          # the overrides (run) or the reason (compose, skip)
    commands: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def needs_marker(self) -> bool:
        return any(c.split()[:1] in (["rlrun"], ["torchrun"]) for c in self.commands)


def commands(text: str) -> tuple[str, ...]:
    """A block's commands: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        line = strip_comment(line).strip()
        if line:
            out.append(line)
    return tuple(out)


def strip_comment(line: str) -> str:
    """``line`` without a trailing ``# comment`` (outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def blocks() -> list[Block]:
    """Every bash block of every page under docs/ (generated snippets excluded)."""
    found = []
    for path in sorted(DOCS.rglob("*.md")):
        if "_snippets" in path.parts:
            continue
        text = path.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marker = MARKER.search(before)
            found.append(Block(str(path.relative_to(DOCS)), line, marker.group(1) if marker else None,
                               marker.group(2).strip() if marker else "", commands(m.group(1))))
    return found


def training_args(command: str) -> tuple[list[str], list[str]] | None:
    """``(prefix, rlrun args)`` of a training command (``rlrun ...`` or ``torchrun ... -m rlrun
    ...``), or None for anything else (a subcommand, another program, a shell line)."""
    if "$" in command:
        return None
    words = shlex.split(command)
    if words[:1] == ["torchrun"] and "rlrun" in words:
        at = words.index("rlrun")
        prefix, args = words[:at + 1], words[at + 1:]
    elif words[:1] == ["rlrun"]:
        prefix, args = words[:1], words[1:]
    else:
        return None
    if args[:1] and args[0] in SUBCOMMANDS or any(a.startswith("--cfg") for a in args):
        return None
    return prefix, args


def with_overrides(args: list[str], overrides: list[str]) -> list[str]:
    """``args`` with ``overrides`` appended, replacing any override of the same key."""
    keys = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    return [a for a in args if a.split("=", 1)[0].lstrip("+~") not in keys or "=" not in a] + overrides


def composed(args: list[str], groups: dict[str, list[str]]) -> list[str]:
    """A command's overrides as one job to compose: ``-m`` dropped, a sweep as its first value, a
    ``glob(*)`` as the group's first option, ``--cfg job`` appended."""
    out = []
    for a in args:
        if a in ("-m", "--multirun"):
            continue
        key, eq, value = a.partition("=")
        if eq and value.startswith("glob(") and value.endswith(")"):
            pattern = value[5:-1].replace("*", ".*")
            group = key.lstrip("+")
            prefix = group.split("/", 1)[1] + "/" if "/" in group else ""
            options = [o[len(prefix):] for o in groups[group.split("/", 1)[0]] if o.startswith(prefix)]
            value = next(o for o in options if re.fullmatch(pattern, o))
        elif eq and "," in value and value[:1] not in "[{'\"":
            value = value.split(",", 1)[0]
        out.append(f"{key}{eq}{value}")
    return [*out, "--cfg", "job"]
