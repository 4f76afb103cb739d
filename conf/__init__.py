"""The config tree that ships with rlrun (mapped from the repository's conf/)."""
