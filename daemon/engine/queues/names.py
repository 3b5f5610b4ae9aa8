"""Queue names by prefix: the ``queue_names`` index that answers ListQueues' QueueNamePrefix.

The ``queues`` table is keyed by name and read in token (hash) order, so a prefix matching few of a
million queues could only be answered by scanning them all. Here a name is stored in the partition
of its first ``PREFIX_CHARS`` characters, clustered by name: a prefix of 2 or more characters is
one partition and one name range (``name >= prefix AND name < prefix + '~'``: '~' sorts after
every character a queue name may hold), read ``limit`` names at a time after the last name given.
A 1-character prefix walks the partitions that can hold it, in name order: at most 1 + 64 reads.

Writes: one plain INSERT per created queue (no LWT: bulk creation stays one LWT per queue, the
queues row's), one DELETE per deleted queue. Names are ASCII, so Cassandra's byte order is name
order. A name whose queue was deleted by a process that crashed between the two deletes stays
listed until the name is deleted again; ListQueues in SQS is eventually consistent too.
"""

from __future__ import annotations

from daemon.engine.storage.db import Database

PREFIX_CHARS = 2
#: Every character a queue name may hold, in byte order: the partitions a 1-character prefix spans.
ALPHABET = "".join(sorted("-_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"))
END = "~"  # sorts after every name character


def partition_of(name: str) -> str:
    return name[:PREFIX_CHARS]


class QueueNames:
    """Statements are prepared on first use (Database.prepare caches them), so a client connects to
    a keyspace whose schema predates the table and fails only when it needs it."""

    def __init__(self, db: Database, keyspace: str) -> None:
        self.db = db
        self.t = f"{keyspace}.queue_names"

    async def add(self, name: str) -> None:
        await self.db.run(
            self.db.prepare(f"INSERT INTO {self.t} (prefix, name) VALUES (?, ?)"), [partition_of(name), name]
        )

    async def remove(self, name: str) -> None:
        await self.db.run(
            self.db.prepare(f"DELETE FROM {self.t} WHERE prefix = ? AND name = ?"), [partition_of(name), name]
        )

    async def matching(self, prefix: str, after: str | None, limit: int) -> tuple[list[str], bool]:
        """Up to ``limit`` names starting with ``prefix`` (non-empty), in name order, after
        ``after``; and whether more follow. Reads: 1 for a prefix of 2+ characters, at most 65
        for a 1-character one (each bounded by ``limit + 1``)."""
        if not prefix:
            raise ValueError("the index answers non-empty prefixes; list every queue from the queues table")
        if after is not None and not after.startswith(prefix):
            return [], False
        found: list[str] = []
        for part in self._partitions(prefix, after):
            found += await self._range(part, prefix, after, limit + 1 - len(found))
            if len(found) > limit:
                return found[:limit], True
        return found, False

    def _partitions(self, prefix: str, after: str | None) -> list[str]:
        if len(prefix) >= PREFIX_CHARS:
            return [prefix[:PREFIX_CHARS]]
        parts = [prefix] + [prefix + c for c in ALPHABET]
        return [p for p in parts if after is None or p >= partition_of(after)]

    async def _range(self, part: str, prefix: str, after: str | None, limit: int) -> list[str]:
        low = max(prefix, part)
        op, start = (">", after) if after is not None and after >= low else (">=", low)
        stmt = self.db.prepare(f"SELECT name FROM {self.t} WHERE prefix = ? AND name {op} ? AND name < ? LIMIT ?")
        rows = await self.db.run(stmt, [part, start, prefix + END, limit])
        return [r.name for r in rows]
