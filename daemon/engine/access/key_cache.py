"""Every SQS access key, held in memory by ``casque serve`` so that verifying a signature costs no
Cassandra read, whatever ids a client makes up.

The ``access_keys`` table is small (one row per client application), so the whole of it is read at
once (``AccessKeyStore.list``) and kept as a dict. It is read again:

* when the copy is older than ``REFRESH_S`` (the slow timer, run by the next request: an idle
  server reads nothing): a key deleted by another process stops working within that time;
* when a request names an id the copy lacks, at most once per ``MISS_REFRESH_S``: a key created
  by another process works within about a second, and a flood of made-up ids costs at most one
  read per second, however many requests it sends. Ids that cannot be casque's (not "CQ" + 18
  letters and digits) don't trigger that read; such an id, if someone stored one, is found by the
  slow timer.

Concurrent requests that need a read share one: at most one read is in flight.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable

from daemon.base.errors import StorageUnavailable
from daemon.engine.access.access_keys import AccessKey, AccessKeyStore

REFRESH_S = 5.0
MISS_REFRESH_S = 1.0
_CASQUE_ID = re.compile(r"^CQ[A-Z0-9]{18}$")


class KeyCache:
    def __init__(self, store: AccessKeyStore, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self._now = monotonic
        self._keys: dict[str, AccessKey] = {}
        self._loaded_at = float("-inf")  # when the read behind the current copy started
        self._tried_at = float("-inf")  # when the last read started, whether or not it succeeded
        self._reading: asyncio.Task[None] | None = None

    async def get(self, key_id: str) -> AccessKey | None:
        """The key with this id, or None; from a copy at most REFRESH_S old."""
        if self._now() - self._loaded_at >= REFRESH_S:
            await self._read()
        key = self._keys.get(key_id)
        if key is None and _CASQUE_ID.match(key_id) and self._now() - self._tried_at >= MISS_REFRESH_S:
            await self._read()
            key = self._keys.get(key_id)
        return key

    async def _read(self) -> None:
        """Join the read in flight, or start one. A stale copy is never used: if reading fails,
        the error (StorageUnavailable) reaches the request; for MISS_REFRESH_S after a failed read,
        requests get that error without a new read, so an outage isn't turned into a read per request."""
        if self._reading is None:
            if self._loaded_at < self._tried_at and self._now() - self._tried_at < MISS_REFRESH_S:
                raise StorageUnavailable("the SQS access keys could not be read from Cassandra a moment ago; retry")
            self._reading = asyncio.ensure_future(self._load())
            self._reading.add_done_callback(self._read_done)
        await asyncio.shield(self._reading)

    def _read_done(self, reading: asyncio.Task[None]) -> None:
        self._reading = None
        if not reading.cancelled():
            reading.exception()  # retrieved here too, in case every request that waited went away

    async def _load(self) -> None:
        started = self._tried_at = self._now()
        keys = await self.store.list()
        self._keys = {k.access_key_id: k for k in keys}
        self._loaded_at = started
