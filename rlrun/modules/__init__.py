"""rlrun.modules."""
