"""User-facing errors: one message that names the config key and the fix."""

from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Iterable


def visible(text: str) -> str:
    """``text`` with control, format (bidi overrides such as U+202E) and separator characters shown
    as escapes (``\\u202e``), so that a hostile name cannot reorder or hide what a terminal shows.
    Line breaks stay: some messages hold several lines (each is escaped alike)."""
    out = []
    for ch in str(text):
        if ch != "\n" and unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            out.append(ch.encode("unicode_escape").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out)


class RlrunError(Exception):
    """An error caused by the user's input, reported without a traceback.

    Args:
        message: What is wrong.
        key: The config key at fault (dotted path), if there is one.
        fix: How to fix it, phrased as an instruction.
    """

    exit_code = 2

    def __init__(self, message: str, key: str | None = None, fix: str | None = None):
        self.message, self.key, self.fix = message, key, fix
        super().__init__(self.render())

    def render(self) -> str:
        head = f"{self.key}: {self.message}" if self.key else str(self.message)
        return visible(f"{head}\n  fix: {self.fix}" if self.fix else head)


class ConfigError(RlrunError):
    """A config value, key or component name is wrong."""


class CheckpointError(RlrunError):
    """A checkpoint cannot be read or does not match the run."""


class WorkerError(RlrunError, RuntimeError):
    """A collector worker died: one line naming it and what to do, then its traceback if it sent one.

    Not the user's input, so not exit code 2: the command exits with 4 (README, Exit codes).
    """

    exit_code = 4

    def __init__(self, what: str, traceback_text: str = ""):
        todo = "fix the error below and rerun" if traceback_text else "rerun"
        super().__init__(f"{what}; the run keeps its last checkpoint: {todo} the same command to resume "
                         "from it" + (f"\n{traceback_text.rstrip()}" if traceback_text else ""))



def did_you_mean(word: str, options: Iterable[str]) -> str:
    """Returns ' Did you mean X?' for a close match among ``options``, else ''."""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""
