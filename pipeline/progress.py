"""Progress of a running job, reported from the driver every few seconds.

Spark's own console bar is off (it fights with log lines); instead a thread reads the status tracker
(tasks done of tasks started, per active stage) and, when given, an accumulator of rows finished,
and logs one line. Accumulators reach the driver as tasks finish, so the row count moves in steps.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

from daemon.base.logs import get_logger

log = get_logger("casque.pipeline")


class Progress:
    """``with Progress(spark, "load", rows=acc): ...`` logs ``<label>_progress`` lines meanwhile."""

    def __init__(self, spark: Any, label: str, rows: Any = None, every_s: float = 5.0) -> None:
        self.sc = spark.sparkContext
        self.label = label
        self.rows = rows
        self.every_s = every_s
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"casque-{label}-progress")

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=self.every_s)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.report()
            except Exception:  # the tracker can fail while the context stops: progress is best effort
                return

    def report(self) -> None:
        tracker = self.sc.statusTracker()
        done = total = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        extra = {"rows_done": self.rows.value} if self.rows is not None else {}
        log.info(
            f"{self.label}_progress",
            tasks_done=done,
            tasks=total,
            seconds=round(time.monotonic() - self.started),
            **extra,
        )
