"""The `rlrun` command: main entry, explain, eval, export, load."""
