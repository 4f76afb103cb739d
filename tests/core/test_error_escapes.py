"""An error line shows control and bidi characters of a name as visible escapes (issue 40 §3): a
path holding U+202E (right-to-left override) or an ESC sequence cannot reorder or clear the line."""

from __future__ import annotations

from cli_utils import run_cli

from rlrun.core.errors import ConfigError, visible


def test_the_error_line_escapes_a_right_to_left_override_and_terminal_controls(tmp_path, capsys):
    path = tmp_path / "x\u202etxt\x1b[2J\x07.pt"
    code, _, err = run_cli(["eval", str(path)], tmp_path, capsys)
    assert code == 2, err
    assert "\u202e" not in err and "\x1b" not in err and "\x07" not in err, repr(err)
    assert "x\\u202etxt\\x1b[2J\\x07.pt" in err, err
    assert len(err.strip().splitlines()) == 2


def test_visible_keeps_text_and_line_breaks():
    assert visible("a b\u00e9\nc") == "a b\u00e9\nc"
    assert visible("\u2066\u200f\t") == "\\u2066\\u200f\\t"
    assert "\\u202e" in str(ConfigError("bad \u202e", key="k\x1b", fix="f")) and "\x1b" not in str(
        ConfigError("x", key="k\x1b"))


def test_a_line_break_in_a_name_stays_on_its_line(tmp_path, capsys):
    """A path with a line break in its name (legal on POSIX) cannot add a line to the error: the
    message and the fix stay one line each, the break shown as ``\\n``."""
    path = tmp_path / "run\nfix: rm -rf ~"
    code, _, err = run_cli(["eval", str(path)], tmp_path, capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 2 and "run\\nfix: rm -rf ~" in err, repr(err)
    assert str(ConfigError("a\nb", key="k\nj", fix="c\nd")) == "k\\nj: a\\nb\n  fix: c\\nd"


def test_a_worker_error_keeps_the_lines_of_its_traceback():
    from rlrun.core.errors import WorkerError

    text = str(WorkerError("collector worker 1", "Traceback (most recent call last):\n  boom\nValueError: x"))
    assert text.splitlines()[-2:] == ["  boom", "ValueError: x"]
