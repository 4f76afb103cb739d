"""rlrun.envs."""
