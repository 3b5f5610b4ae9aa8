"""A lease: one holder at a time for a named duty, across every daemon of a cluster.

Some work must be done once per cluster, not once per daemon (computing the queue gauges reads
every row of every queue). The duty's row in ``leases`` names its holder; it is claimed with
``INSERT ... IF NOT EXISTS`` and renewed with ``UPDATE ... IF holder = me``, both with a TTL, so
two daemons never both hold it (Paxos), and a holder that dies frees it within one TTL. A holder
that cannot renew (Cassandra unreachable) must assume it lost the lease.
"""

from __future__ import annotations

import math

from daemon.base.errors import CasqueError
from daemon.engine.storage.db import Database


class Lease:
    def __init__(self, db: Database, keyspace: str, name: str, holder: str, ttl_s: float) -> None:
        self.db = db
        self.name = name
        self.holder = holder
        self.ttl = max(1, math.ceil(ttl_s))
        t = f"{keyspace}.leases"
        self._claim = db.prepare(f"INSERT INTO {t} (name, holder) VALUES (?, ?) IF NOT EXISTS USING TTL ?")
        self._renew = db.prepare(f"UPDATE {t} USING TTL ? SET holder = ? WHERE name = ? IF holder = ?")
        self._drop = db.prepare(f"DELETE FROM {t} WHERE name = ? IF holder = ?")

    async def hold(self) -> bool:
        """Claim or renew; True while this holder has the lease for the next TTL."""
        try:
            rows = await self.db.run(self._claim, [self.name, self.holder, self.ttl])
            if rows and rows[0].applied:
                return True
            rows = await self.db.run(self._renew, [self.ttl, self.holder, self.name, self.holder])
            return bool(rows and rows[0].applied)
        except CasqueError:
            return False

    async def release(self) -> None:
        """Give the lease up now (on shutdown), so another daemon takes over without waiting."""
        try:
            await self.db.run(self._drop, [self.name, self.holder])
        except CasqueError:
            pass
