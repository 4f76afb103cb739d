"""gymnasium env ids checked without torch: the build (``rlrun.envs.gym``) and the command's
precheck (``rlrun.lifecycle.compose.check_env_id``, before torch is imported) give the same one line."""

from __future__ import annotations

from rlrun.core.errors import ConfigError


def check_registered(id: str, name: str | None = None) -> None:
    """Raises ``ConfigError`` (key ``env.id``, with the fix) when gymnasium has no env ``name``
    (default ``id``; ``id`` is what the message names)."""
    import gymnasium as gym

    try:
        gym.spec(name or id)
    except gym.error.Error as err:
        raise ConfigError(
            f"gymnasium has no environment {id!r} ({type(err).__name__}: {err})", key="env.id",
            fix="choose a registered id (python -c 'import gymnasium; gymnasium.pprint_registry()'), "
            "name the module that registers it (env.id=pkg.module:Name-v0 or env.imports=[pkg]), "
            "or pick a preset: env=cartpole|pendulum|...",
        ) from None
