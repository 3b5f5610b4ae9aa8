"""Dead-letter queue -> the queues whose RedrivePolicy names it: the ``dead_letter_sources`` index.

Without it, ListDeadLetterSourceQueues (and StartMessageMoveTask's check that its source is a
dead-letter queue) had to read the attributes of every queue in the keyspace. The index is kept by
the two places a queue's dead-letter target changes: ``QueueAttributes.set`` (a RedrivePolicy set,
changed or removed: the old link is dropped, the new one written) and ``admin.delete_queue`` (the
deleted queue stops being a source). A dead-letter queue's own deletion keeps its partition: SQS
policies name ARNs, so a queue re-created under that name is again their dead-letter queue.
"""

from __future__ import annotations

from daemon.engine.storage.db import Database


class DeadLetterSources:
    """Statements are prepared on first use, like QueueNames: old keyspaces still connect."""

    def __init__(self, db: Database, keyspace: str) -> None:
        self.db = db
        self.t = f"{keyspace}.dead_letter_sources"

    async def link(self, target: str, source: str) -> None:
        await self.db.run(self.db.prepare(f"INSERT INTO {self.t} (target, source) VALUES (?, ?)"), [target, source])

    async def unlink(self, target: str, source: str) -> None:
        await self.db.run(self.db.prepare(f"DELETE FROM {self.t} WHERE target = ? AND source = ?"), [target, source])

    async def page(self, target: str, after: str | None, limit: int) -> tuple[list[str], bool]:
        """Up to ``limit`` source queues of ``target`` in name order after ``after``, and whether
        more follow: one read of ``limit + 1`` rows of one partition."""
        if after is None:
            stmt, args = f"SELECT source FROM {self.t} WHERE target = ? LIMIT ?", [target, limit + 1]
        else:
            stmt, args = (
                f"SELECT source FROM {self.t} WHERE target = ? AND source > ? LIMIT ?",
                [target, after, limit + 1],
            )
        rows = await self.db.run(self.db.prepare(stmt), args)
        names = [r.source for r in rows]
        return names[:limit], len(names) > limit

    async def is_target(self, target: str) -> bool:
        """Whether some queue's RedrivePolicy names ``target`` (one read of one row)."""
        return bool((await self.page(target, None, 1))[0])
