"""The run's logger from the moment the run is built: its tracker run is made by ``open``.

A run resumed from a checkpoint opens its tracker run only once the checkpoint is restored: a
checkpoint that does not fit must not leave an empty tracker run behind. The trainer is built
(and restored) before that, yet holds its logger from its constructor on: this one, which makes
the configured logger (``rlrun.core.registry.build``) when the run opens it and passes every
call on from then.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlrun.core.contracts import Logger


class DeferredLogger(Logger):
    """The configured logger (``node``), made by ``open``; before that, ``run_id`` is None and any
    other call is a bug (the run logs nothing before its tracker run opens).

    Args:
        node: The ``logger`` config node.
    """

    def __init__(self, node: Any):
        self.node = node
        self.opened: Logger | None = None

    def open(self, **kwargs: Any) -> Logger:
        """Makes the logger (its tracker run) with ``kwargs`` (run_dir, run_name, run_id, ...)."""
        from rlrun.core.registry import build

        if self.opened is not None:
            raise RuntimeError("the run's logger is open already")
        self.opened = build("logger", self.node, **kwargs)
        return self.opened

    def _logger(self) -> Logger:
        if self.opened is None:
            raise RuntimeError("the run's logger is used before the run opened it")
        return self.opened

    @property
    def run_id(self) -> str | None:  # type: ignore[override]
        return self.opened.run_id if self.opened is not None else None

    def log_params(self, params: dict[str, Any]) -> None:
        self._logger().log_params(params)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._logger().log_metrics(metrics, step)

    def log_artifact(self, path: str | Path) -> None:
        self._logger().log_artifact(path)

    def set_tags(self, tags: dict[str, str]) -> None:
        self._logger().set_tags(tags)

    def commit(self, step: int) -> None:
        self._logger().commit(step)

    def finish(self, status: str = "FINISHED") -> None:
        self._logger().finish(status)
