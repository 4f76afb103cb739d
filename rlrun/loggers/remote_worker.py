"""The MLflow worker process that ``rlrun.loggers.remote`` starts: one ``MLflowLogger``, serving
the run's logger calls line by line (its own module, so that the client side, which
``rlrun.loggers.tracking`` imports, does not import the tracking module back)."""

from __future__ import annotations

import importlib.abc
import json
import os
import sys
from pathlib import Path
from typing import Any

from rlrun.core.errors import ConfigError
from rlrun.core.signals import die_with_parent, survive_stop_signals


def serve() -> None:
    """The worker: one ``MLflowLogger``, a request per line of stdin, a reply per line."""
    die_with_parent()
    parent = os.getppid()
    survive_stop_signals()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # MLflow's own prints go to stderr, never into the replies
    sys.stdout = sys.stderr
    if os.getppid() != parent:
        return
    sys.meta_path.insert(0, WithoutDataLibraries())
    from rlrun.loggers.mlflow_logger import MLflowLogger, store_errors

    try:  # MLflow's client and SQLite store modules, before the request that needs them arrives
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
        import mlflow.tracking  # noqa: F401
    except ImportError:  # open_store reports it
        pass

    logger = MLflowLogger()
    where: dict[str, Any] = {}
    for line in sys.stdin:
        request = json.loads(line)
        op, kwargs = request["op"], request["kwargs"]
        try:
            if op == "open_store":
                where = kwargs
                with store_errors(kwargs["tracking_uri"], None):
                    logger.open_store(kwargs["tracking_uri"], Path(kwargs["root"]), kwargs["experiment"])
                result = None
            elif op == "start_run":
                with store_errors(where.get("tracking_uri"), kwargs["run_id"]):
                    logger.start_run(**kwargs)
                result = logger.run_id
            elif op == "log_metric_rows":
                result = logger.log_metric_rows([(int(s), int(t), m) for s, t, m in kwargs["rows"]])
            else:
                result = getattr(logger, op)(**kwargs)
            reply = {"result": result}
        except ConfigError as err:
            reply = {"config_error": err.message, "key": err.key, "fix": err.fix}
        except Exception as err:
            from rlrun.loggers.store import error_line

            reply = {"error": error_line(err)}
        out.write(json.dumps(reply) + "\n")
        if op == "finish":  # done: the run's forked children may hold our stdin open past its end
            _exit_now(out)


class WithoutDataLibraries(importlib.abc.MetaPathFinder):
    """Makes this process import MLflow as its ``mlflow-skinny`` distribution runs: without pandas,
    numpy and the libraries they bring (scipy, pyarrow, scikit-learn).

    ``mlflow`` is ``mlflow-skinny`` plus those libraries, which it needs for datasets, evaluation
    and model flavours; skinny's code guards every import of them (``mlflow.data`` registers the
    pandas dataset only if pandas imports). This process only opens a store and logs params,
    metrics, tags and artifacts, which need none of them. Importing pandas (with numpy) was 0.5-0.9 s
    of the worker's 3-4.5 s of CPU before the store opens, and the run waits for that (issue 27).
    """

    HIDDEN = frozenset({"pandas", "numpy", "scipy", "pyarrow", "sklearn"})

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name.partition(".")[0] in self.HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r} (the MLflow worker runs without it; "
                                      "RLRUN_MLFLOW_IN_PROCESS=1 runs MLflow in the run's process)",
                                      name=name)
        return None


def _exit_now(out: Any) -> None:
    """Ends the worker without the interpreter's teardown.

    Every call of the logger is synchronous (``MlflowClient``; the store committed before the
    reply was written), so nothing is left to flush but our own streams. The teardown of a
    process with MLflow and SQLAlchemy loaded (module clean-up, final garbage collections) held
    the run's exit 5.4-5.7 s on this project's 2-core machine at load 10, the run waiting for the
    worker to end; ``os._exit`` ends it in milliseconds.
    """
    for stream in (out, sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


if __name__ == "__main__":
    serve()
