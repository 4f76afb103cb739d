"""A built component that lacks a member of its kind's protocol is refused in one line naming the
component, the members and the protocol (a mutation survivor of issue 45: registry.py:243)."""

from __future__ import annotations

import pytest

from rlrun.core import registry
from rlrun.core.errors import ConfigError


def test_a_component_lacking_protocol_members_is_one_config_error():
    with pytest.raises(ConfigError) as err:
        registry.build("collector", {"_target_": "argparse.Namespace"}, key="collector")
    assert err.value.key == "collector"
    assert "the collector Namespace lacks" in err.value.message and "Source" in err.value.message
    assert "add " in err.value.fix and "to Namespace" in err.value.fix
