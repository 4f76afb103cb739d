"""rlrun.algos."""
