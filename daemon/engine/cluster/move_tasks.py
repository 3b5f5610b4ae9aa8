"""Message move tasks as stored in Cassandra: what StartMessageMoveTask creates, every server's
ListMessageMoveTasks reads, and the runner (engine/operations/mover.py) advances.

Two tables (engine/storage/schema.py): ``move_tasks`` holds each task (partition = its source queue,
newest first, a TTL of 14 days from its start: SQS lists the tasks of the last 14 days), and
``move_tasks_active`` holds one row per source with a task not yet ended, claimed with
``INSERT ... IF NOT EXISTS``: that LWT is what makes "one active task per source" hold between
servers racing to start one. Runners list the active rows (one small partition) to find work.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

from daemon.engine.storage.db import Database

KEEP_S = 14 * 86_400
RUNNING, COMPLETED, CANCELLING, CANCELLED, FAILED = "RUNNING", "COMPLETED", "CANCELLING", "CANCELLED", "FAILED"
ENDED = {COMPLETED, CANCELLED, FAILED}
_COLS = "source, started_at, task_id, destination, rate, status, moved, to_move, failure, updated_at"


@dataclass(frozen=True)
class MoveTask:
    source: str
    started_at: int
    task_id: uuid.UUID
    destination: str | None = None  # None: each message back to the queue it was dead-lettered from
    rate: int | None = None  # messages per second; None: as fast as the runner goes
    status: str = RUNNING
    moved: int = 0
    to_move: int = 0
    failure: str | None = None
    updated_at: int = 0
    cancel_requested: bool = False

    @property
    def shown_status(self) -> str:
        """What ListMessageMoveTasks says: a running task asked to stop is CANCELLING."""
        return CANCELLING if self.status == RUNNING and self.cancel_requested else self.status

    @property
    def key(self) -> tuple[str, int, uuid.UUID]:
        return self.source, self.started_at, self.task_id


class MoveTaskStore:
    """Statements are prepared on first use (a keyspace whose schema predates the tables still
    connects; only move tasks then fail)."""

    def __init__(self, db: Database, keyspace: str) -> None:
        self.db = db
        self.ks = keyspace

    def _p(self, cql: str) -> Any:
        return self.db.prepare(cql.format(ks=self.ks))

    async def claim(self, task: MoveTask) -> bool:
        """Make ``task`` its source's active task and store it; False if the source has one already
        (an active row left by a task that ended without removing it is cleared first)."""
        for _ in range(2):
            rows = await self.db.run(
                self._p(
                    "INSERT INTO {ks}.move_tasks_active (slot, source, started_at, task_id) VALUES (0, ?, ?, ?) "
                    "IF NOT EXISTS"
                ),
                [task.source, task.started_at, task.task_id],
            )
            if rows and rows[0].applied:
                await self.save(task)
                return True
            current = await self.get(task.source, rows[0].started_at, rows[0].task_id) if rows else None
            if current is None or current.status not in ENDED:
                return False
            await self.release(current)
        return False

    async def save(self, task: MoveTask) -> None:
        """The whole row (but ``cancel_requested``), with a TTL ending 14 days after the start."""
        ttl = max(1, KEEP_S - (task.updated_at - task.started_at) // 1000)
        await self.db.run(
            self._p(f"INSERT INTO {{ks}}.move_tasks ({_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?) USING TTL ?"),
            [
                task.source,
                task.started_at,
                task.task_id,
                task.destination,
                task.rate,
                task.status,
                task.moved,
                task.to_move,
                task.failure,
                task.updated_at,
                ttl,
            ],
        )

    async def request_cancel(self, task: MoveTask, now_ms: int) -> None:
        ttl = max(1, KEEP_S - (now_ms - task.started_at) // 1000)
        await self.db.run(
            self._p(
                "UPDATE {ks}.move_tasks USING TTL ? SET cancel_requested = true WHERE source = ? AND started_at = ? "
                "AND task_id = ?"
            ),
            [ttl, *task.key],
        )

    async def get(self, source: str, started_at: int, task_id: uuid.UUID) -> MoveTask | None:
        rows = await self.db.run(
            self._p(
                f"SELECT {_COLS}, cancel_requested FROM {{ks}}.move_tasks WHERE source = ? AND started_at = ? "
                "AND task_id = ?"
            ),
            [source, started_at, task_id],
        )
        return _task(rows[0]) if rows and rows[0].status else None

    async def newest(self, source: str, limit: int) -> list[MoveTask]:
        """The source's tasks of the last 14 days, newest first: one read of ``limit`` rows."""
        rows = await self.db.run(
            self._p(f"SELECT {_COLS}, cancel_requested FROM {{ks}}.move_tasks WHERE source = ? LIMIT ?"),
            [source, limit],
        )
        return [_task(r) for r in rows if r.status]

    async def active(self) -> list[tuple[str, int, uuid.UUID]]:
        """Every source's active task (one partition, as many rows as tasks not yet ended)."""
        rows = await self.db.run(
            self._p("SELECT source, started_at, task_id FROM {ks}.move_tasks_active WHERE slot = 0")
        )
        return [(r.source, r.started_at, r.task_id) for r in rows]

    async def release(self, task: MoveTask) -> None:
        """The task ended: its source may start another (only if the active row is still its own)."""
        await self.db.run(
            self._p("DELETE FROM {ks}.move_tasks_active WHERE slot = 0 AND source = ? IF task_id = ?"),
            [task.source, task.task_id],
        )

    async def finish(self, task: MoveTask, status: str, now_ms: int, failure: str | None = None) -> MoveTask:
        ended = replace(task, status=status, failure=failure, updated_at=now_ms)
        await self.save(ended)
        await self.release(ended)
        return ended


def _task(r: Any) -> MoveTask:
    return MoveTask(
        r.source,
        r.started_at,
        r.task_id,
        r.destination,
        r.rate,
        r.status,
        r.moved or 0,
        r.to_move or 0,
        r.failure,
        r.updated_at or 0,
        bool(r.cancel_requested),
    )
