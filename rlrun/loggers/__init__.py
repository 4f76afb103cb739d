"""Loggers for trackers outside rlrun's core (``rlrun.lifecycle.tracking`` holds MLflow, CSV, TensorBoard).

Each module registers its logger when imported (``rlrun.core.registry.BUILTIN_MODULES``) and imports
its tracker's package only when that logger is built, so start-up stays fast.
"""
