"""rlrun.objectives."""
