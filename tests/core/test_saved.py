"""rlrun.core.saved: the one checked reader of saved files (issue 40 §2), one test per field class.

Each class: size, YAML structure (alias bombs, depth, recursion, tags, syntax), text encoding,
JSON constants, and the schema's types, ranges and path components.
"""

from __future__ import annotations

import time

import pytest

from rlrun.core import saved
from rlrun.core.errors import RlrunError

# 1,860 characters: 9 levels of 9 aliases each, 9**9 (387 million) leaves once expanded.
_BOMB = "a: &a [" + ",".join(["x"] * 9) + "]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8))
_BOMB += "env: {}\nmodel: {}\n"
ALIAS_BOMB = _BOMB + "#" * (1859 - len(_BOMB)) + "\n"


def one_line(err: RlrunError, *words: str) -> None:
    text = err.render()
    assert len(text.splitlines()) <= 2 and "Traceback" not in text, text
    for w in words:
        assert w in text, text


def test_an_alias_bomb_is_refused_before_it_is_expanded(tmp_path):
    assert len(ALIAS_BOMB) == 1860
    path = tmp_path / "config.yaml"
    path.write_text(ALIAS_BOMB)
    start = time.perf_counter()
    with pytest.raises(saved.SavedFileError) as err:
        saved.load_yaml(path)
    assert time.perf_counter() - start < 0.5
    one_line(err.value, str(path), "alias bomb", "fix:")


def test_shared_aliases_within_the_bound_still_load():
    text = "base: &b {lr: 1e-3, n: 2}\nx: *b\ny: *b\n"
    assert saved.parse_yaml(text, "f") == {"base": {"lr": 0.001, "n": 2}, "x": {"lr": 0.001, "n": 2},
                                          "y": {"lr": 0.001, "n": 2}}


def test_a_recursive_alias_is_refused():
    with pytest.raises(saved.SavedFileError) as err:
        saved.parse_yaml("a: &a [*a]\n", "f.yaml")
    one_line(err.value, "f.yaml", "recursive")


@pytest.mark.parametrize("text", ["[" * 5000 + "]" * 5000,
                                  "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 400))])
def test_deep_nesting_is_refused_without_a_recursion_error(text):
    with pytest.raises(saved.SavedFileError) as err:
        saved.parse_yaml(text, "deep.yaml")
    one_line(err.value, "deep.yaml")


@pytest.mark.parametrize("text", ["a: !!python/object/apply:os.system ['true']\n", "a: [1, 2\n",
                                  "b: !custom 1\n", "? [a]\n: 1\n", "a: !!python/name:os.system\n",
                                  "env:\n  \u202e\x00k: 1\n"])
def test_unsafe_tags_and_syntax_errors_are_one_line(text):
    with pytest.raises(saved.SavedFileError) as err:
        saved.parse_yaml(text, "bad.yaml")
    one_line(err.value, "bad.yaml", "not plain YAML")


def test_non_utf8_text_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"a: \xff\xfe\n")
    with pytest.raises(saved.SavedFileError) as err:
        saved.load_yaml(path)
    one_line(err.value, "not UTF-8")


def test_the_size_bound_is_checked_before_reading(tmp_path, monkeypatch):
    monkeypatch.setitem(saved.LIMITS, "yaml", 100)
    path = tmp_path / "big.yaml"
    path.write_text("a: 1\n" * 100)
    with pytest.raises(saved.SavedFileError) as err:
        saved.load_yaml(path)
    one_line(err.value, "big.yaml", "MB")
    with pytest.raises(saved.SavedFileError):
        saved.load_yaml(tmp_path)  # a directory is not a regular file


def test_json_nan_and_infinity_are_refused(tmp_path):
    path = tmp_path / "summary.json"
    for text in ('{"frames": NaN}', '{"frames": Infinity}', "[" * 100000 + "]" * 100000, "{"):
        path.write_text(text)
        with pytest.raises(saved.SavedFileError) as err:
            saved.load_json(path)
        one_line(err.value, "summary.json", "not JSON")


@pytest.mark.parametrize(("check", "good", "bad"), [
    (saved.integer(0), [0, 7], ["7", 1.5, -1, True, None, [1]]),
    (saved.number(), [1, 2.5], ["1", float("nan"), float("inf"), False]),
    (saved.kind(dict, name="a mapping"), [{}], [[], "x", 1]),
    (saved.path_component(), ["seed_1", 3], ["../x", "a/b", "..", "", "a\0b", ["x"]]),
])
def test_schema_checks_types_ranges_and_path_components(check, good, bad):
    assert all(check(v) is None for v in good)
    assert all(check(v) for v in bad)


def test_check_fields_names_the_file_and_the_field():
    schema = {"frames": (saved.integer(0), True), "config": (saved.kind(str, name="YAML text"), False)}
    assert saved.check_fields({"frames": 3}, schema, "c.pt") == {"frames": 3}
    cases = (({"frames": "3"}, "frames"), ({"frames": 1, "config": [1]}, "config"), ({}, "frames"))
    for data, field in cases:
        with pytest.raises(saved.SavedFileError) as err:
            saved.check_fields(data, schema, "c.pt")
        one_line(err.value, f"c.pt: {field}")
    with pytest.raises(saved.SavedFileError) as err:
        saved.check_fields(["not", "a", "dict"], schema, "c.pt")
    one_line(err.value, "c.pt", "mapping")


def test_a_json_object_with_a_key_twice_is_refused(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text('{"status": "finished", "status": "running"}')
    with pytest.raises(saved.SavedFileError, match="'status' appears twice"):
        saved.load_json(path)


@pytest.mark.parametrize("text, key", [("total_frames: 100\ntotal_frames: 5\n", "total_frames"),
                                       ("trainer: {lr: 1, lr: 2}\n", "lr"),
                                       ("hooks:\n- {a: 1}\n- {b: 1, b: 2}\n", "b")])
def test_a_yaml_mapping_with_a_key_twice_is_refused(tmp_path, text, key):
    """As for JSON: which value counts differs between readers (PyYAML keeps the last, OmegaConf
    refuses the file), so rlrun refuses it rather than guess."""
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(saved.SavedFileError, match=f"holds the key '{key}' twice in one mapping"):
        saved.load_yaml(path)
    distinct = saved.parse_yaml("1: a\n'1': b\nx: &A {y: 1}\nz: *A\n", "ok.yaml")  # 1 and '1' differ
    assert distinct == {1: "a", "1": "b", "x": {"y": 1}, "z": {"y": 1}}
