"""The registry's untrusted mode alone (issue 45.2): while a loaded config is built, no
``_target_`` is imported or called, wherever it sits; outside it, the user's own is."""

from __future__ import annotations

import threading

import pytest

from rlrun.core import registry
from rlrun.core.errors import ConfigError

IMPORTS: list[str] = []


@pytest.fixture
def watched(monkeypatch):
    """Records every import path the registry would resolve."""
    real = registry._import_target
    IMPORTS.clear()

    def recording(path, key):
        IMPORTS.append(path)
        return real(path, key)
    monkeypatch.setattr(registry, "_import_target", recording)
    return IMPORTS


@pytest.mark.parametrize("kind", ["env", "model", "loss", "buffer", "collector", "logger", "hook",
                                  "exploration", "optim"])
def test_untrusted_mode_refuses_a_target_of_every_kind_before_importing(kind, watched):
    with registry.untrusted("saved.pt"), pytest.raises(ConfigError) as err:
        registry.build(kind, {"_target_": "os.system", "command": "true"}, key=f"sec.{kind}")
    assert err.value.key == f"sec.{kind}._target_" and "saved.pt" in err.value.message
    assert watched == []


def test_untrusted_mode_refuses_a_target_beside_a_name(watched):
    """A node naming a registered component and a ``_target_``: the target would win, so it is refused."""
    with registry.untrusted("saved.pt"), pytest.raises(ConfigError):
        registry.resolve_factory("model", {"name": "mlp", "_target_": "os.system"}, "model")
    assert watched == []


def test_untrusted_mode_ends_with_its_block_and_nests(watched):
    node = {"_target_": "argparse.Namespace", "a": 1}
    with registry.untrusted("outer.pt"):
        with registry.untrusted("inner.pt"), pytest.raises(ConfigError) as err:
            registry.build("model", node)
        assert "inner.pt" in err.value.message
        with pytest.raises(ConfigError) as err:  # the outer block still holds after the inner one
            registry.build("model", node)
        assert "outer.pt" in err.value.message
    assert watched == []
    assert registry.build("model", node).a == 1  # the user's own config: allowed
    assert watched == ["argparse.Namespace"]


def test_untrusted_mode_ends_when_its_block_raises(watched):
    with pytest.raises(RuntimeError), registry.untrusted("saved.pt"):
        raise RuntimeError
    assert registry.build("model", {"_target_": "argparse.Namespace", "a": 2}).a == 2


def test_untrusted_mode_holds_only_in_its_own_thread(watched):
    """A loader in one thread does not switch the guard off, or on, for another."""
    seen = []
    with registry.untrusted("saved.pt"):
        t = threading.Thread(target=lambda: seen.append(
            registry.build("model", {"_target_": "argparse.Namespace", "a": 3}).a))
        t.start()
        t.join()
        with pytest.raises(ConfigError):
            registry.build("model", {"_target_": "argparse.Namespace"})
    assert seen == [3]
