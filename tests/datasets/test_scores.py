"""D4RL normalisation: the paper's raw/normalised pairs and D4RL's constants."""

from __future__ import annotations

import pytest

from rlrun.core.errors import ConfigError
from rlrun.datasets.scores import d4rl_normalized_score, d4rl_reference


def test_reference_constants_and_gymnasium_names():
    assert d4rl_reference("HalfCheetah-v5") == (-280.178953, 12135.0)
    assert d4rl_reference("hopper") == (-20.272305, 3234.3)
    assert d4rl_reference("Walker2d-v4") == (1.629008, 4592.3)
    assert d4rl_reference("Ant-v5") == (-325.6, 3879.7)
    with pytest.raises(ConfigError, match="no D4RL reference"):
        d4rl_reference("Pendulum-v1")


def test_paper_iql_halfcheetah_raw_return_maps_to_its_normalised_score():
    # Table 2 (shared/paper/results.yaml): IQL HalfCheetah 4864 raw, quoted by issue 14 as 41.4 normalised
    assert d4rl_normalized_score(4864.0, "HalfCheetah-v5") == pytest.approx(
        100 * (4864.0 + 280.178953) / (12135.0 + 280.178953))
    assert round(float(d4rl_normalized_score(4864.0, "halfcheetah")), 1) == 41.4
    assert d4rl_normalized_score([-20.272305, 3234.3], "Hopper-v5").tolist() == pytest.approx([0.0, 100.0])
