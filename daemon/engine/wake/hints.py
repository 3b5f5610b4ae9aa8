"""Wake hints: a signed UDP datagram that tells other processes "this queue has a message due".

Within one process a send wakes parked long polls and the dispatcher's consumers directly
(engine/wake/wakeups.py). Across processes Cassandra is the only thing shared, so without a hint a
message sent by another process is found only by polling. After a send's write is
*acknowledged*, the sender sends one datagram (a few for a large ``send_many``) to each live
listener that serves the queue (engine/wake/hint_directory.py says who listens); the listener calls
``Wakeups.notify`` for each entry, exactly as an in-process send does.

A hint is only ever a reason to look sooner. It carries no message and changes nothing in
Cassandra: a lost, late or dropped hint costs latency (a daemon's safety poll or, for a parked long
poll, the due feed finds the message: engine/wake/due_feed.py), never a message. That is why
sending is fire-and-forget and can never delay or fail a send.

Datagram, version 1 (big-endian)::

    version u8 | sent_at_ms u64 | queue length u8 | queue utf-8 | count u16
    | count x (due_ms u64, placement u32) | tag 16 bytes

``tag`` = the first 16 bytes of HMAC-SHA256 (key: the cluster secret ``hint-hmac``, engine/access/secrets.py)
over everything before it. A datagram that is not version 1, is cut short, has a bad tag, or was
sent more than the clock tolerance away from the receiver's now is dropped and counted by reason
(``casque_hints_rejected_total{reason}``); a replay within the tolerance only causes one more look.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import socket
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cassandra import InvalidRequest

from daemon.base import metrics
from daemon.base.clock import Clock
from daemon.base.config import Settings
from daemon.base.errors import UsageError
from daemon.base.logs import get_logger
from daemon.engine.access.secrets import SecretStore
from daemon.engine.wake.hint_directory import (
    HintDirectory,
    ListenerEntry,
    format_address,
    listen_addresses,
    parse_address,
)

log = get_logger("casque.hints")

VERSION = 1
HINT_KEY = "hint-hmac"
TAG_BYTES = 16
MAX_DATAGRAM = 1400  # below a 1,500-byte Ethernet MTU with IP and UDP headers: never fragmented
MAX_ENTRIES = 100  # 100 x 12 bytes + an 80-character queue name + header + tag < MAX_DATAGRAM
MAX_DATAGRAMS = 4  # per send call: a send_many beyond 400 distinct (due, row) entries keeps its earliest
_HEAD = struct.Struct(">BQB")
_COUNT = struct.Struct(">H")
_ENTRY = struct.Struct(">QI")

Entry = tuple[int, int]  # (due_ms, placement: the low 32 bits of the message id)


@dataclass(frozen=True)
class Hint:
    sent_at_ms: int
    queue: str
    entries: list[Entry]


class Rejected(Exception):
    """A datagram that is not a valid hint; ``reason`` labels the rejection counter."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def encode(key: bytes, sent_at_ms: int, queue: str, entries: list[Entry]) -> bytes:
    name = queue.encode("utf-8")
    if len(name) > 255 or len(entries) > MAX_ENTRIES:
        raise ValueError(f"a hint holds a queue name of at most 255 bytes and {MAX_ENTRIES} entries")
    body = b"".join(
        [
            _HEAD.pack(VERSION, sent_at_ms, len(name)),
            name,
            _COUNT.pack(len(entries)),
            *(_ENTRY.pack(due, placement & 0xFFFF_FFFF) for due, placement in entries),
        ]
    )
    return body + _tag(key, body)


def decode(key: bytes, data: bytes, now_ms: int, tolerance_ms: int) -> Hint:
    """The hint in ``data``, or ``Rejected`` saying why not (checked in this order: version,
    length, tag, layout, age), so garbage never reaches the parser unauthenticated."""
    if not data or data[0] != VERSION:
        raise Rejected("version")
    if len(data) < _HEAD.size + _COUNT.size + TAG_BYTES:
        raise Rejected("truncated")
    body, tag = data[:-TAG_BYTES], data[-TAG_BYTES:]
    if not hmac.compare_digest(tag, _tag(key, body)):
        raise Rejected("signature")
    _, sent_at, qlen = _HEAD.unpack_from(body)
    at = _HEAD.size + qlen
    if len(body) < at + _COUNT.size:
        raise Rejected("malformed")
    (count,) = _COUNT.unpack_from(body, at)
    at += _COUNT.size
    if len(body) != at + count * _ENTRY.size:
        raise Rejected("malformed")
    try:
        queue = body[_HEAD.size : _HEAD.size + qlen].decode("utf-8")
    except UnicodeDecodeError:
        raise Rejected("malformed") from None
    if abs(now_ms - sent_at) > tolerance_ms:
        raise Rejected("stale")
    return Hint(sent_at, queue, [_ENTRY.unpack_from(body, at + i * _ENTRY.size) for i in range(count)])


def _tag(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, body, hashlib.sha256).digest()[:TAG_BYTES]


def pack(entries: Iterable[Entry], shard_counts: tuple[int, ...] = ()) -> list[list[Entry]]:
    """The entries of one send call, compacted and split into datagrams. Entries that land in the
    same row at the same due time wake the same consumer, so one of them stands for all (500
    messages due now on 16 shards are 16 entries); the earliest ``MAX_DATAGRAMS * MAX_ENTRIES`` are
    kept, and the rest are left to the consumers' look-ahead, the safety poll and the due feed."""
    seen: dict[tuple[int, int | tuple[int, ...]], Entry]
    ordered = list(entries)[::-1]  # a later duplicate is overwritten by an earlier one: the first seen stands
    if len(shard_counts) == 1:  # the usual case, kept cheap
        n = shard_counts[0]
        seen = {(e[0], e[1] % n): e for e in ordered}
    else:  # during a reshard a row per layout; with no settings known, every placement counts
        seen = {(e[0], tuple(e[1] % n for n in shard_counts) or e[1]): e for e in ordered}
    kept = sorted(seen.values())
    limit = MAX_DATAGRAMS * MAX_ENTRIES
    if len(kept) > limit:
        metrics.HINTS_SEND_FAILED.labels("over_cap").inc(len(kept) - limit)
        kept = kept[:limit]
    return [kept[i : i + MAX_ENTRIES] for i in range(0, len(kept), MAX_ENTRIES)]


class HintSender:
    """Sends hints after acknowledged sends, to every live listener of the queue except our own.

    Who listens is read from ``hint_listeners`` (one single-partition read) at most every
    ``refresh_s`` seconds, lazily, by the first send that finds the view stale; with a fresh view a
    hint costs one HMAC and one non-blocking ``sendto`` per listener, sent before ``send`` returns
    (the later sends of the same event loop turn share one, ``_enqueue``); nothing waits for them.
    With no listener of the queue, nothing is sent."""

    def __init__(self, directory: HintDirectory, secrets: SecretStore, clock: Clock, refresh_s: float) -> None:
        self.directory = directory
        self.secrets = secrets
        self.clock = clock
        self.refresh_s = refresh_s
        self.own: set[str] = set()  # our own listeners' addresses: in-process notify covers them
        self._key: bytes | None = None
        self._view: list[ListenerEntry] = []
        self._view_at = float("-inf")
        self._refresh: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self._sockets: dict[int, socket.socket] = {}
        self._outbox: dict[str, tuple[list[Entry], tuple[int, ...]]] = {}
        self._flush_armed = False

    def announce(self, queue: str, entries: Iterable[Entry], shard_counts: tuple[int, ...] = ()) -> None:
        """Hint ``entries`` of ``queue`` to the other processes. Never raises, never waits."""
        try:
            if time.monotonic() - self._view_at < self.refresh_s:
                self._enqueue(queue, entries, shard_counts)
                return
            task = asyncio.get_running_loop().create_task(self._refreshed_send(queue, list(entries), shard_counts))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
        except Exception as exc:  # noqa: BLE001 - a hint must never fail the send that triggered it
            metrics.HINTS_SEND_FAILED.labels("error").inc()
            log.debug("hint_failed", queue=queue, error=str(exc))

    def _enqueue(self, queue: str, entries: Iterable[Entry], shard_counts: tuple[int, ...]) -> None:
        """The first send of an event loop turn hints at once; the sends that complete later in
        the same turn share one datagram per queue, sent at the end of the turn. So a lone send
        loses no time (as it would if every hint waited for the turn's end) and a burst of
        concurrent sends pays one HMAC and one ``sendto`` per turn, not per send."""
        if not any(e.serves(queue) and e.address not in self.own for e in self._view):
            return
        if not self._flush_armed:
            self._flush_armed = True
            asyncio.get_running_loop().call_soon(self.flush)
            self._send(queue, list(entries), shard_counts)
            return
        waiting = self._outbox.get(queue)
        if waiting is None:
            waiting = self._outbox[queue] = ([], shard_counts)
        waiting[0].extend(entries)

    def flush(self) -> None:
        """Send what ``_enqueue`` gathered since the turn's first send (at the end of the turn, or at close)."""
        self._flush_armed = False
        outbox, self._outbox = self._outbox, {}
        for queue, (entries, shard_counts) in outbox.items():
            try:
                self._send(queue, entries, shard_counts)
            except Exception as exc:  # noqa: BLE001 - never raised into the loop: counted, the poll finds it
                metrics.HINTS_SEND_FAILED.labels("error").inc()
                log.debug("hint_failed", queue=queue, error=str(exc))

    async def _refreshed_send(self, queue: str, entries: list[Entry], shard_counts: tuple[int, ...]) -> None:
        try:
            if self._refresh is None or self._refresh.done():
                self._refresh = asyncio.get_running_loop().create_task(self._reload())
            await asyncio.shield(self._refresh)
            self._send(queue, entries, shard_counts)
        except Exception as exc:  # noqa: BLE001 - counted; the safety poll or the due feed finds it
            metrics.HINTS_SEND_FAILED.labels("directory").inc()
            log.debug("hint_directory_unavailable", queue=queue, error=str(exc))

    async def _reload(self) -> None:
        """Read the key (once) and the listeners. A failed read leaves an empty view that is
        trusted for ``refresh_s`` too, so an outage or an old schema costs one read per interval."""
        try:
            if self._key is None:
                self._key = await self.secrets.get_or_create(HINT_KEY)
            self._view = await self.directory.live()
        except BaseException:
            self._view = []
            raise
        finally:
            self._view_at = time.monotonic()

    def _send(self, queue: str, entries: list[Entry], shard_counts: tuple[int, ...]) -> None:
        targets = [e.address for e in self._view if e.serves(queue) and e.address not in self.own]
        if not targets or not entries:
            return
        assert self._key is not None
        now = self.clock.now_ms()
        datagrams = [encode(self._key, now, queue, chunk) for chunk in pack(entries, shard_counts)]
        for address in targets:
            for data in datagrams:
                self._sendto(data, address)

    def _sendto(self, data: bytes, address: str) -> None:
        try:
            host, port = parse_address(address)
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = self._sockets.get(family)
            if sock is None:
                sock = self._sockets[family] = socket.socket(family, socket.SOCK_DGRAM)
                sock.setblocking(False)
            sock.sendto(data, (host, port))
            metrics.HINTS_SENT.inc()
        except (OSError, ValueError) as exc:  # full buffer, unreachable, bad row: the hint is lost, not the message
            metrics.HINTS_SEND_FAILED.labels("socket").inc()
            log.debug("hint_not_sent", address=address, error=str(exc))

    async def settled(self, timeout_s: float = 1.0) -> None:
        """Wait, at most ``timeout_s``, for the hints still waiting for the directory (its read included) to go out."""
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=timeout_s)

    async def close(self, timeout_s: float = 1.0) -> None:
        """Let hints still waiting for the directory go out (a CLI ``casque send`` exits right
        after its send), for at most ``timeout_s``; then close the sockets."""
        await self.settled(timeout_s)
        self.flush()
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()


Notify = Callable[[str, int, "int | None"], None]


class HintProtocol(asyncio.DatagramProtocol):
    """Verifies each datagram and turns a valid hint into ``notify(queue, due_ms, placement)``
    calls. Nothing a datagram holds can make it raise: bad ones are counted and dropped."""

    def __init__(self, key: bytes, clock: Clock, tolerance_ms: int, notify: Notify) -> None:
        self.key = key
        self.clock = clock
        self.tolerance_ms = tolerance_ms
        self.notify = notify

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            hint = decode(self.key, data, self.clock.now_ms(), self.tolerance_ms)
        except Rejected as exc:
            metrics.HINTS_REJECTED.labels(exc.reason).inc()
            log.debug("hint_rejected", reason=exc.reason, sender=addr[0], size=len(data))
            return
        metrics.HINTS_RECEIVED.inc()
        for due, placement in hint.entries:
            try:
                self.notify(hint.queue, due, placement)
            except Exception as exc:  # noqa: BLE001 - one subscriber's bug must not stop the listener
                log.warning("hint_notify_failed", queue=hint.queue, error=str(exc))

    def error_received(self, exc: Exception) -> None:
        log.debug("hint_socket_error", error=str(exc))


class HintListener:
    """A UDP socket that receives hints for ``queues`` (``['*']``: every queue) and keeps its row in
    ``hint_listeners`` alive (renewed every ``RENEW_S``, expiring ``TTL_S`` after the last renewal),
    so producers find it within their refresh interval and forget it soon after it dies."""

    RENEW_S = 5.0
    TTL_S = 15

    def __init__(self, directory: HintDirectory, clock: Clock, queues: list[str]) -> None:
        self.directory = directory
        self.clock = clock
        self.queues = sorted(set(queues))
        self.address = ""
        self._transport: asyncio.DatagramTransport | None = None
        self._renewer: asyncio.Task[None] | None = None

    async def start(
        self, key: bytes, bind: tuple[str, int], advertise: tuple[str, int], tolerance_ms: int, notify: Notify
    ) -> str:
        """Bind, register, and start renewing; returns the advertised ``host:port`` (port 0 in
        ``advertise``: the bound port)."""
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: HintProtocol(key, self.clock, tolerance_ms, notify), local_addr=bind
        )
        self._transport = transport
        self.address = format_address(advertise[0], advertise[1] or transport.get_extra_info("sockname")[1])
        try:
            await self._register()
        except BaseException:
            transport.close()
            raise
        self._renewer = loop.create_task(self._renew(), name="casque-hint-listener")
        log.info("hints_listening", address=self.address, queues=self.queues)
        return self.address

    async def _register(self) -> None:
        await self.directory.register(self.address, self.queues, self.clock.now_ms(), self.TTL_S)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.RENEW_S)
            try:
                await self._register()
            except Exception as exc:  # noqa: BLE001 - Cassandra away: producers fall back to polling
                log.warning("hint_listener_renew_failed", address=self.address, error=str(exc))

    async def close(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            await asyncio.gather(self._renewer, return_exceptions=True)
        if self._transport is not None:
            self._transport.close()
        if self.address:
            try:
                await self.directory.remove(self.address)
            except Exception as exc:  # noqa: BLE001 - the row expires with its TTL anyway
                log.warning("hint_listener_unregister_failed", address=self.address, error=str(exc))


async def open_listener(
    directory: HintDirectory, secrets: SecretStore, clock: Clock, settings: Settings, queues: list[str], notify: Notify
) -> HintListener | None:
    """A started, registered listener for ``queues``, bound as ``[hints]`` says; None (and a
    warning naming the fix) when the keyspace predates ``hint_listeners``, so the caller serves on
    without hints. A bad or busy address is a one-line UsageError."""
    h, c = settings.hints, settings.cassandra
    try:
        bind, advertise = listen_addresses(h.address, h.advertise, c.contact_points, c.port)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    listener = HintListener(directory, clock, queues)
    key = await secrets.get_or_create(HINT_KEY)
    try:
        await listener.start(key, bind, advertise, settings.worker.clock_tolerance_ms, notify)
    except OSError as exc:
        raise UsageError(
            f"cannot listen for hints on {format_address(*bind)} ({exc.strerror}): set hints.address to a free "
            "host[:port] of this host, or hints.listen = false"
        ) from None
    except InvalidRequest as exc:
        log.warning(
            "hints_unavailable", error=str(exc), fix="run 'casque schema apply' to add the hint_listeners table"
        )
        return None
    return listener
