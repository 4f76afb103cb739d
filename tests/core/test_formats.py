"""Format versions of saved files (issue 40 §4): newer formats are refused in one line, and a
change to a saved format without a migration fails here."""

from __future__ import annotations

import pytest
import torch
from cli_utils import run_cli

from rlrun.core import formats

# The versions the golden files and migrations were made for. Bumping a format in
# rlrun.core.formats.CURRENT without adding its migration (and updating this list) fails here.
PINNED = {"checkpoint": 3, "policy": 1, "summary": 1, "dataset": 1}


def test_every_saved_format_is_pinned_and_each_older_version_is_migrated_or_refused_on_purpose():
    assert {k: v for k, (_, v) in formats.CURRENT.items()} == PINNED, (
        "a saved format changed: add a migration to rlrun.core.formats.MIGRATIONS and golden files")
    for kind, (_, current) in formats.CURRENT.items():
        for old in range(formats.UNVERSIONED.get(kind, 1), current):
            refused_on_purpose = (kind, old) == ("checkpoint", 1)
            assert (kind, old) in formats.MIGRATIONS or refused_on_purpose, (kind, old)


@pytest.mark.parametrize(("kind", "field"), [("checkpoint", "format_version"), ("policy", "policy_format")])
def test_a_newer_format_is_refused_in_one_line(tmp_path, capsys, kind, field):
    path = tmp_path / ("checkpoint.pt" if kind == "checkpoint" else "policy.pt")
    torch.save({field: PINNED[kind] + 1, "frames": 0, "policy": {}, "config": "env: {}\nmodel: {}\n"}, path)
    code, _, err = run_cli(["eval", str(path)], tmp_path, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and "newer rlrun" in lines[0] and str(path) in lines[0], err
    assert "upgrade" in lines[1], err


def test_an_old_checkpoint_format_is_one_line_with_the_fix(tmp_path):
    with pytest.raises(formats.FormatError) as err:
        formats.upgrade("checkpoint", {"format_version": 1}, tmp_path / "c.pt")
    assert "format 1" in err.value.message and "rlrun that wrote it" in err.value.fix


def test_checkpoint_2_to_3_saves_the_policy_apart_and_drops_mappo_ippos_twin_ppo_keys():
    w = torch.ones(2)
    old = {"format_version": 2, "loss": {"policy.actor.w": w, "ppo.actor.w": w, "log_alpha": w}}
    new = formats.upgrade("checkpoint", old, "c.pt")
    assert new["format_version"] == 3
    assert set(new["loss"]) == {"policy.actor.w", "log_alpha"} and set(new["policy"]) == {"actor.w"}
    # ppo.* keys that are not the policy's twins are some loss's own: kept
    kept = formats.upgrade("checkpoint", {"format_version": 2, "loss": {"ppo.x": w}}, "c.pt")
    assert set(kept["loss"]) == {"ppo.x"}


def test_an_older_config_reads_in_todays_spelling():
    old = {"env": {"name": "gym", "id": "CartPole-v1"}, "loss": {"name": "marl_ppo"},
           "hooks": {"gae": {"name": "multiagent_gae", "lmbda": 0.9}}, "checkpoint": {"interval_frames": 5}}
    new = formats.upgrade_config(old)
    assert new["env"]["reward_scale"] == 1.0 and new["env"]["imports"] == [] and new["dataset"] is None
    assert new["loss"] == {"name": "ppo", "critic_loss": "l2"}
    assert new["hooks"]["gae"] == {"name": "gae", "lmbda": 0.9, "group": "agents"}
    assert new["checkpoint"] == {"interval_frames": 5, "interval_updates": None, "keep_best": False,
                                 "keep_last": 1}
    assert old["loss"] == {"name": "marl_ppo"}  # the caller's mapping is left as it was
    vmas = formats.upgrade_config({"env": {"name": "vmas"}})
    assert "reward_scale" not in vmas["env"]


@pytest.mark.parametrize("kind", ["summary", "dataset"])
def test_a_file_from_before_versions_reads_as_format_0_and_is_brought_forward(kind):
    field = formats.CURRENT[kind][0]
    new = formats.upgrade(kind, {"status": "finished", "rlrun": {"seed": 0}}, "f.json")
    assert formats.version_of(kind, new) == PINNED[kind]
    assert new["rlrun"]["seed"] == 0 and (kind != "dataset" or new["rlrun"][field.split(".")[1]] == 1)
    with pytest.raises(formats.FormatError, match="newer rlrun"):
        formats.upgrade(kind, _at(kind, PINNED[kind] + 1), "f.json")


def _at(kind: str, version: int) -> dict:
    *parents, leaf = formats.CURRENT[kind][0].split(".")
    return {parents[0]: {leaf: version}} if parents else {leaf: version}
