"""``Stores``: the one place that builds the engine's stores from (settings, db, clock).

Every store is wired here and only here, so each process holds one of each per connection (one
settings cache, one history writer, one access-key cache) and nobody rebuilds a store by hand with
the keyspace spelled out again. The facade (engine/client.py) owns one ``Stores``; the operation
modules between the two (engine/operations/: admin, stats, reshard, the reaper, the mover, ...) take it
instead of the facade, so nothing in the engine imports the facade.

The stores every send or receive needs are built at once. Those only some processes use (history,
heartbeats, samples, access keys, move tasks) are built on first use: their statements are
prepared then, so a process that never reads them prepares nothing for them, as before.
"""

from __future__ import annotations

from functools import cached_property

from daemon.base.clock import Clock
from daemon.base.config import Settings
from daemon.base.logs import get_logger
from daemon.engine.access.access_keys import AccessKeyStore
from daemon.engine.access.secrets import SecretStore
from daemon.engine.cluster.activity import ActivityMarks
from daemon.engine.cluster.heartbeats import Heartbeats
from daemon.engine.cluster.lease import Lease
from daemon.engine.cluster.move_tasks import MoveTaskStore
from daemon.engine.delivery.acks import Acker
from daemon.engine.delivery.deadletter import PoisonRouter
from daemon.engine.delivery.poison import PoisonStore
from daemon.engine.delivery.receive_attempts import ReceiveAttempts
from daemon.engine.observe.depth_estimate import DepthEstimator
from daemon.engine.observe.history import History
from daemon.engine.observe.samples import Samples
from daemon.engine.queues.attributes import QueueAttributes
from daemon.engine.queues.cooldown import Cooldowns
from daemon.engine.queues.store import QueueStore
from daemon.engine.send.fifo_send import FifoSender
from daemon.engine.send.keys import KeyStore
from daemon.engine.send.lookup import Lookup
from daemon.engine.send.producer import Producer
from daemon.engine.storage.db import Database
from daemon.engine.storage.table import MessageTable
from daemon.engine.wake.due_feed import DueFeed
from daemon.engine.wake.hint_directory import HintDirectory
from daemon.engine.wake.hints import HintSender
from daemon.engine.wake.wakeups import Wakeups


class Stores:
    """The engine's stores over one connection, each built once."""

    def __init__(self, settings: Settings, db: Database, clock: Clock) -> None:
        self.settings = settings
        self.db = db
        self.clock = clock
        self.keyspace = ks = settings.cassandra.keyspace
        self.queues = QueueStore(db, ks, clock)
        self.table = MessageTable(db, ks)
        self.keys = KeyStore(db, ks)
        self.poison = PoisonStore(db, ks)
        self.lookup = Lookup(db, self.queues, self.table, self.keys)
        self.fifo = FifoSender(db, self.table, ks, clock, self.tolerance_ms)
        self.producer = Producer(
            db, self.queues, self.table, self.keys, self.lookup, clock, tolerance_ms=self.tolerance_ms, fifo=self.fifo
        )
        self.secrets = SecretStore(db, ks, clock)
        self.attributes = QueueAttributes(db, ks, self.queues)
        self.queues.row_seen = self.attributes.remember  # one read of a row fills both caches
        self.activity = ActivityMarks(db, ks, self.queues, clock)
        self.wakeups = Wakeups(clock)
        self.producer.catcher = self.wakeups.catch  # a send hands its messages to a parked poll (wake/catch.py)
        self.hint_directory = HintDirectory(db, ks)
        self.hints = HintSender(self.hint_directory, self.secrets, clock, settings.hints.refresh)
        self.due_feed = DueFeed(db, ks, clock, self.tolerance_ms)  # what finds a message whose hint was lost
        # Queue rows: trusted a minute while the feed covers, every write to one announced through it, and forgotten
        # when another process's is told (engine/queues/store.py).
        self.queues.covered_since, self.queues.announce = self.due_feed.covered_since, self.due_feed.changed
        self.due_feed.forget = self._forget_row
        self.due_feed.after_read = self.queues.refresh
        self.dead_letters = PoisonRouter(
            db, self.queues, self.table, self.attributes, self.poison, self.wakeups.notify, fifo=self.fifo
        )
        self.receive_attempts = ReceiveAttempts(db, ks)
        self.acker = Acker(db, self.table, self.queues, self.keys, self.dead_letters, clock)  # type: ignore[arg-type]

    def _forget_row(self, queue: str) -> None:
        self.queues.forget(queue)
        self.attributes.forget(queue)

    async def check_clock(self) -> int:
        """Compare our clock with the coordinator's; warn when the difference eats into the clock
        tolerance that the cursors rely on (docs/design.md). Returns the measured offset in ms."""
        before = self.clock.now_ms()
        rows = await self.db.run("SELECT toUnixTimestamp(now()) AS t FROM system.local")
        after = self.clock.now_ms()
        offset = before + (after - before) // 2 - int(rows[0].t) if rows else 0
        limit = self.settings.worker.clock_tolerance_ms / 2
        if abs(offset) > limit:
            get_logger("casque.client").warning(
                "clock_skew_exceeds_tolerance",
                offset_ms=offset,
                limit_ms=int(limit),
                fix="synchronise this host's clock (NTP) or raise worker.clock_tolerance",
            )
        return offset

    @property
    def tolerance_ms(self) -> int:
        """The clock tolerance the cursors rely on (docs/design.md), in ms."""
        return self.settings.worker.clock_tolerance_ms

    @cached_property
    def history(self) -> History:
        return History(self.db, self.keyspace, self.queues)

    @cached_property
    def heartbeats(self) -> Heartbeats:
        return Heartbeats(self.db, self.keyspace)

    @cached_property
    def samples(self) -> Samples:
        return Samples(self.db, self.keyspace)

    @cached_property
    def access_keys(self) -> AccessKeyStore:
        return AccessKeyStore(self.db, self.keyspace, self.clock)

    @cached_property
    def move_tasks(self) -> MoveTaskStore:
        return MoveTaskStore(self.db, self.keyspace)

    def lease(self, name: str, holder: str, ttl_s: float) -> Lease:
        """A bid for the cluster-wide lease ``name`` (engine/cluster/lease.py), held by ``holder``."""
        return Lease(self.db, self.keyspace, name, holder, ttl_s=ttl_s)

    def cooldowns(self, holder: str) -> Cooldowns:
        """Cluster-wide waits after an action (engine/queues/cooldown.py), taken as ``holder``."""
        return Cooldowns(self.db, self.keyspace, holder)

    def depth_estimator(self) -> DepthEstimator:
        """A new estimator of queue depths: each user keeps its own, since its caches of cursors
        and of large lanes' counts are tuned to how often that user asks (engine/observe/depth_estimate.py)."""
        return DepthEstimator(self.db, self.table)
