"""rlrun's Hydra plugins (installed as ``hydra_plugins.rlrun_launch``, mapped from ``rlrun/launch/``)."""
