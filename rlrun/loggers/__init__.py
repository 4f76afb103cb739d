"""Loggers for trackers outside rlrun's core (``rlrun.tracking`` holds MLflow, CSV, TensorBoard).

Each module registers its logger when imported (``rlrun.registry.BUILTIN_MODULES``) and imports
its tracker's package only when that logger is built, so start-up stays fast.
"""
