"""rlrun.trainer."""
