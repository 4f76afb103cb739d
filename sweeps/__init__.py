"""Checked-in sweeps (``+sweep=NAME``) and searches (``+hpo=NAME``), shipped as ``rlrun.sweeps``.

Hydra finds them through rlrun's search-path plugin
(``hydra_plugins.rlrun_launch``), which adds ``pkg://rlrun.sweeps``.
"""
