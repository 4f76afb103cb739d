"""User-facing errors: one message that names the config key and the fix."""

from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Iterable


def visible(text: str, newlines: bool = True) -> str:
    """``text`` with control, format (bidi overrides such as U+202E) and separator characters shown
    as escapes (``\\u202e``), so that a hostile name cannot reorder or hide what a terminal shows.
    Line breaks stay with ``newlines`` (a text of several lines, each escaped alike), else they are
    shown as ``\\n`` too."""
    out = []
    for ch in str(text):
        if (ch != "\n" or not newlines) and unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
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
    multiline = False  # the message may hold line breaks (a worker's traceback); else they are escaped

    def __init__(self, message: str, key: str | None = None, fix: str | None = None):
        self.message, self.key, self.fix = message, key, fix
        super().__init__(self.render())

    def render(self) -> str:
        """``key: message`` and ``  fix: ...``: one line each, whatever a value quoted in them holds
        (a path with a line break in its name stays on its line, the break shown as ``\\n``)."""
        message = visible(self.message, newlines=self.multiline)
        head = f"{visible(self.key, newlines=False)}: {message}" if self.key else message
        return f"{head}\n  fix: {visible(self.fix, newlines=False)}" if self.fix else head


class ConfigError(RlrunError):
    """A config value, key or component name is wrong."""


class CheckpointError(RlrunError):
    """A checkpoint cannot be read or does not match the run."""


class WorkerError(RlrunError, RuntimeError):
    """A collector worker died: one line naming it and what to do, then its traceback if it sent one.

    Not the user's input, so not exit code 2: the command exits with 4 (README, Exit codes).
    """

    exit_code = 4
    multiline = True

    def __init__(self, what: str, traceback_text: str = ""):
        todo = "fix the error below and rerun" if traceback_text else "rerun"
        super().__init__(f"{what}; the run keeps its last checkpoint: {todo} the same command to resume "
                         "from it" + (f"\n{traceback_text.rstrip()}" if traceback_text else ""))



def did_you_mean(word: str, options: Iterable[str]) -> str:
    """Returns ' Did you mean X?' for a close match among ``options``, else ''."""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""
