"""The connection to Cassandra, and the bridge from driver futures to asyncio.

The driver's own asyncio reactor is still experimental, so casque uses its default (libev when the
C extension is there) and turns each ``ResponseFuture`` into an asyncio future with
``call_soon_threadsafe``. Statements are prepared once and routed token-aware, so a single-partition
read or write goes straight to a replica.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
import socket
import ssl
import threading
from collections import namedtuple
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from cassandra import (
    ConsistencyLevel,
    DriverException,
    InvalidRequest,
    OperationTimedOut,
    ReadFailure,
    ReadTimeout,
    Unavailable,
    WriteTimeout,
)
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable, Session
from cassandra.policies import (
    DCAwareRoundRobinPolicy,
    ExponentialReconnectionPolicy,
    RetryPolicy,
    TokenAwarePolicy,
)
from cassandra.query import BatchStatement, BatchType, PreparedStatement, Statement, _clean_column_name

from daemon.base.clock import SYSTEM_CLOCK, Clock
from daemon.base.config import CassandraSettings
from daemon.base.errors import ConfigError, StorageRefused, StorageUnavailable

try:  # the compiled libev reactor is the fastest; fall back to the pure-Python one
    from cassandra.io.libevreactor import LibevConnection as _Connection
except ImportError:  # pragma: no cover - depends on how the wheel was built
    from cassandra.io.asyncorereactor import AsyncoreConnection as _Connection


_ROW_TYPES: dict[tuple[str, ...], Any] = {}

#: TCP_NODELAY on every connection to the node. The driver leaves Nagle's algorithm on and writes a request
#: in 4,096-byte pieces: the rest of any larger request (a take's or an ack's batch) would wait for the node's
#: delayed ACK of the first piece, 40 ms, and every request queued behind it with it (tests/test_db_socket.py).
SOCKOPTS = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]

_CONDITIONAL = re.compile(r"\s*(INSERT|UPDATE|DELETE)\b.*\sIF\s", re.S | re.I)


class ConditionalWritesNotResent(RetryPolicy):
    """The driver's retry policy, except that a conditional write (an LWT) is never sent again, whatever the
    driver was told. The driver re-sends a request on the next host after a broken connection, a node's error
    answer or an Unavailable, and on the same host after some timeouts; but an LWT may have applied all the same
    (Cassandra's Paxos answers Unavailable when its commit finds a replica down *after* a quorum accepted the
    proposal). The re-sent one then answers "not applied" and shows our own row as if another writer held it: a
    FIFO send took its own dedup claim for a duplicate's and deleted its message's place; a keyed send with "keep"
    would answer with its own id and write nothing. Raised instead, the outcome is unknown to the caller, as for
    an LWT's write timeout, and each LWT's caller handles that: its retry finds the first attempt's row."""

    def on_request_error(self, query: Any, consistency: Any, error: Any, retry_num: int) -> tuple[int, Any]:
        if is_conditional(query):
            return self.RETHROW, None
        return super().on_request_error(query, consistency, error, retry_num)

    # The driver passes the node's answer by keyword (``**response.info``): passed on as it came.
    def on_unavailable(self, query: Any, *args: Any, **kwargs: Any) -> tuple[int, Any]:
        if is_conditional(query):
            return self.RETHROW, None
        return super().on_unavailable(query, *args, **kwargs)

    def on_read_timeout(self, query: Any, *args: Any, **kwargs: Any) -> tuple[int, Any]:
        if is_conditional(query):
            return self.RETHROW, None
        return super().on_read_timeout(query, *args, **kwargs)

    def on_write_timeout(self, query: Any, *args: Any, **kwargs: Any) -> tuple[int, Any]:
        if is_conditional(query):
            return self.RETHROW, None
        return super().on_write_timeout(query, *args, **kwargs)


def is_conditional(query: Any) -> bool:
    """Whether a statement is a conditional write (``INSERT ... IF NOT EXISTS``, ``UPDATE ... IF c = ?``)."""
    prepared = getattr(query, "prepared_statement", None)
    text = prepared.query_string if prepared is not None else getattr(query, "query_string", "")
    return bool(_CONDITIONAL.match(text))


def too_many_tombstones(exc: BaseException) -> bool:
    """Whether a failed read failed on the replicas' side (READ_TOO_MANY_TOMBSTONES is what a pile causes)."""
    return isinstance(exc, StorageUnavailable) and isinstance(exc.__cause__, ReadFailure)


#: Called with (database, statement) before each request through ``Database.run`` or ``run_all`` (the
#: requests ``count_request`` counts; ``run_all`` pages count as one); may return a
#: callable that is called (with no arguments) once that request has its answer or its error.
RequestObserver = Callable[["Database", Any], Callable[[], None] | None]
#: The observers of every Database in the process (bench counts the CQL of a daemon it did not
#: build): a tuple replaced whole, so ``run`` reads it without a lock, and an empty tuple is one
#: truth test per request when nobody observes.
_OBSERVERS: tuple[RequestObserver, ...] = ()


def row_factory(colnames: list[str], rows: list[Any]) -> list[Any]:
    """Rows as named tuples, like the driver's default, but with one class per column list: the
    default builds a new namedtuple class for every result, a cost paid on every read."""
    key = tuple(colnames)
    cls = _ROW_TYPES.get(key)
    if cls is None:
        cls = _ROW_TYPES[key] = namedtuple("Row", [_clean_column_name(c) for c in colnames], rename=True)
    return [cls(*r) for r in rows]


def consistency(name: str, key: str = "cassandra.consistency") -> int:
    try:
        return getattr(ConsistencyLevel, name.upper())
    except AttributeError:
        choices = ", ".join(sorted(ConsistencyLevel.name_to_value))
        raise ConfigError(f"{key} {name!r} is not a consistency level: use one of {choices}") from None


class Database:
    """A connected session plus helpers: ``await db.run(stmt, params)`` and prepared-statement caching."""

    def __init__(self, settings: CassandraSettings, clock: Clock = SYSTEM_CLOCK) -> None:
        self.settings = settings
        self.clock = clock
        self._last_ts = 0
        self._ts_lock = threading.Lock()
        self.cl = consistency(settings.consistency)
        self.serial_cl = consistency(settings.serial_consistency, "cassandra.serial_consistency")
        self.cluster: Cluster | None = None
        self.session: Session | None = None
        self._prepared: dict[str, PreparedStatement] = {}
        self._texts: dict[bytes, str] = {}  # prepared query id -> CQL text (to name a batch's members)
        #: Requests sent by this process, and how many of them were reads (SELECTs): what tests and
        #: benchmarks count to show a cost is bounded (an empty long poll: 0 while it waits).
        self.requests = 0
        self.reads = 0

    # ---- connection -------------------------------------------------------------------------
    def connect(self, keyspace: str | None = None) -> Database:
        """Connect (blocking). Raises StorageUnavailable with the address and the fix."""
        s = self.settings
        policy = TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=s.local_dc or None))
        profile = ExecutionProfile(
            load_balancing_policy=policy,
            consistency_level=self.cl,
            serial_consistency_level=self.serial_cl,
            retry_policy=ConditionalWritesNotResent(),
            request_timeout=s.request_timeout,
            row_factory=row_factory,
        )
        self.cluster = Cluster(
            contact_points=s.contact_points,
            port=s.port,
            connection_class=_Connection,
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            auth_provider=PlainTextAuthProvider(s.username, s.password) if s.username else None,
            ssl_context=_ssl_context(s),
            connect_timeout=s.connect_timeout,
            control_connection_timeout=s.connect_timeout,
            # v4, not v5: v5 wraps every frame in CRC32-checksummed segments, which cost more
            # client CPU than anything else per request.
            protocol_version=4,
            timestamp_generator=self.next_timestamp,
            # The driver's default waits up to 10 minutes between reconnection attempts; a daemon
            # should notice a returning node within seconds.
            reconnection_policy=ExponentialReconnectionPolicy(base_delay=0.5, max_delay=10.0),
            sockopts=SOCKOPTS,
        )
        try:
            self.session = self.cluster.connect(keyspace)
        except NoHostAvailable as exc:
            # "using keyspace" is the driver's word for pools that could not USE it: for a keyspace missing from the
            # schema the control connection read, or for nodes that stopped answering meanwhile (a frozen node).
            known = self.cluster.metadata.keyspaces
            missing = bool(keyspace and "using keyspace" in str(exc) and known and keyspace not in known)
            self.close()
            if missing:
                raise StorageRefused(f"keyspace '{keyspace}' does not exist: run 'casque schema apply' first") from None
            raise _no_host(s, exc) from None
        except Exception as exc:
            self.close()
            if "does not exist" in str(exc) or "Keyspace" in str(exc):
                raise StorageRefused(f"keyspace '{keyspace}' does not exist: run 'casque schema apply' first") from None
            raise StorageUnavailable(f"cannot connect to Cassandra at {_where(s)}: {exc}") from None
        # The driver's prepare waits its session's own timeout (10 s), not the profile's request_timeout: set to it,
        # a prepare gives up when any other request would (no public setter while execution profiles are in use).
        self.session._default_timeout = s.request_timeout
        return self

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.shutdown()
        self.cluster = None
        self.session = None

    # ---- statements -------------------------------------------------------------------------
    def prepare(self, cql: str) -> PreparedStatement:
        stmt = self._prepared.get(cql)
        if stmt is None:
            assert self.session is not None, "not connected"
            try:
                stmt = self.session.prepare(cql)
            except InvalidRequest as exc:
                if "Undefined column name" not in str(exc):
                    raise  # a missing table is for the caller to judge: some serve on without it (hints)
                raise StorageRefused(
                    f"keyspace '{self.session.keyspace}' predates this casque ({_server_message(exc)}): "
                    "run 'casque schema apply' to add what is missing"
                ) from None
            except (NoHostAvailable, DriverException) as exc:  # a timeout, no node: as from any other request
                raise StorageUnavailable(describe_failure(exc)) from None
            self._prepared[cql] = stmt
            self._texts[stmt.query_id] = cql
        return stmt

    def statement_text(self, query_id: bytes) -> str | None:
        """The CQL text of a statement this database prepared: a batch carries only query ids."""
        return self._texts.get(query_id)

    def prepared_of(self, query_id: bytes) -> PreparedStatement | None:
        """The statement this database prepared under ``query_id`` (its bind markers name the columns a
        batch member writes: bench/cqlcount.py counts the bytes and the payloads written)."""
        text = self._texts.get(query_id)
        return None if text is None else self._prepared.get(text)

    # ---- observing requests -----------------------------------------------------------------
    @staticmethod
    def observe(observer: RequestObserver) -> Callable[[], None]:
        """Call ``observer`` for every request any Database of this process sends through ``run`` or
        ``run_all`` (see ``RequestObserver``); returns the function that stops it. The supported way to count
        or trace requests (bench/cqlcount.py, bench/taketrace.py) instead of replacing ``run``."""
        global _OBSERVERS
        _OBSERVERS = _OBSERVERS + (observer,)

        def stop() -> None:
            global _OBSERVERS
            _OBSERVERS = tuple(o for o in _OBSERVERS if o is not observer)

        return stop

    @staticmethod
    @contextmanager
    def observing(observer: RequestObserver) -> Iterator[None]:
        """``observe`` for the length of a ``with`` block."""
        stop = Database.observe(observer)
        try:
            yield
        finally:
            stop()

    def batch(self, logged: bool = False) -> BatchStatement:
        kind = BatchType.LOGGED if logged else BatchType.UNLOGGED
        return BatchStatement(batch_type=kind, consistency_level=self.cl)

    def execute(self, stmt: str | Statement, params: Sequence[Any] | None = None) -> Any:
        """Blocking execute, for the CLI and schema; errors become StorageUnavailable."""
        assert self.session is not None, "not connected"
        try:
            return self.session.execute(stmt, params)
        except (NoHostAvailable, DriverException) as exc:
            raise StorageUnavailable(describe_failure(exc)) from None

    async def run(
        self,
        stmt: str | Statement,
        params: Sequence[Any] | None = None,
        timeout: float | None = None,
        timestamp: int | None = None,
    ) -> Any:
        """Execute asynchronously and return the ResultSet's rows (first page) as a list.
        ``timestamp`` (us) sets the write timestamp of every mutation in the statement."""
        assert self.session is not None, "not connected"
        if _OBSERVERS:
            return await self._run_observed(stmt, params, timeout, timestamp)
        return await self._send(stmt, params, timeout, timestamp)

    def _send(
        self, stmt: str | Statement, params: Sequence[Any] | None, timeout: float | None, timestamp: int | None
    ) -> asyncio.Future[list[Any]]:
        """Send one request; a plain function returning the answer's future, so an unobserved ``run``
        costs one call more than before and no extra coroutine."""
        assert self.session is not None, "not connected"
        self.count_request(stmt)
        token = _TS_OVERRIDE.set(timestamp)
        try:
            rf = self.session.execute_async(stmt, params, timeout=timeout or self.settings.request_timeout)
        finally:
            _TS_OVERRIDE.reset(token)
        return wrap_future(rf)

    async def _run_observed(
        self, stmt: str | Statement, params: Sequence[Any] | None, timeout: float | None, timestamp: int | None
    ) -> Any:
        """``run`` with the observers told before the request and, through what they returned, after it."""
        done = [d for d in (observer(self, stmt) for observer in _OBSERVERS) if d is not None]
        try:
            return await self._send(stmt, params, timeout, timestamp)
        finally:
            for d in reversed(done):
                d()

    async def run_all(self, stmt: str | Statement, params: Sequence[Any] | None = None) -> list[Any]:
        """Every page of a result (for admin reads that may exceed one page), counted as one request.
        Each page is its own asynchronous request, never a thread waiting on the driver: a thread paging
        through ``session.execute`` waits without a bound for each next page, and when the session closed
        under it (a daemon stopping) that page never came and the thread kept the process from exiting."""
        assert self.session is not None, "not connected"
        done = [d for d in (observer(self, stmt) for observer in _OBSERVERS) if d is not None] if _OBSERVERS else []
        self.count_request(stmt)
        try:
            rows: list[Any] = []
            token: bytes | None = None
            while True:
                page, token = await self.page(stmt, params, token)
                rows += page
                if not token:
                    return rows
        finally:
            for d in reversed(done):
                d()

    async def page(
        self, stmt: str | Statement, params: Sequence[Any] | None, token: bytes | None
    ) -> tuple[list[Any], bytes | None]:
        """One page of a result from ``token`` (None: the first), and the token of the next (None: this was the
        last). Not counted: the callers (``run_all``, storage/paging.py) count the read as they see it."""
        session = self.session
        if session is None or session.is_shutdown:
            raise StorageUnavailable("the connection to Cassandra was closed while a read was paging")
        rf = session.execute_async(stmt, params, timeout=self.settings.request_timeout, paging_state=token)
        rows = await wrap_future(rf)
        return rows, rf.result().paging_state or None  # done: result() returns at once

    def count_request(self, stmt: str | Statement) -> None:
        self.requests += 1
        if _is_read(stmt):
            self.reads += 1

    def now_us(self) -> int:
        """Microseconds on this database's clock: the default write timestamp."""
        return self.clock.now_ms() * 1000

    def next_timestamp(self) -> int:
        """Write timestamps follow the injectable clock (so a skewed consumer writes skewed
        timestamps, as a skewed host would), strictly increasing, unless overridden per call."""
        forced = _TS_OVERRIDE.get()
        if forced is not None:
            return forced
        with self._ts_lock:
            self._last_ts = max(self.now_us(), self._last_ts + 1)
            return self._last_ts


def _is_read(stmt: str | Statement) -> bool:
    """A SELECT (a bound statement's prepared text, or plain text); batches are writes."""
    prepared = getattr(stmt, "prepared_statement", None)
    text = (
        prepared.query_string
        if prepared is not None
        else stmt
        if isinstance(stmt, str)
        else getattr(stmt, "query_string", "")
    )
    return text.lstrip()[:6].upper() == "SELECT"


_TS_OVERRIDE: contextvars.ContextVar[int | None] = contextvars.ContextVar("casque_write_ts", default=None)


def wrap_future(rf: Any) -> asyncio.Future[list[Any]]:
    """Bridge a driver ResponseFuture to an asyncio future on the running loop."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[list[Any]] = loop.create_future()

    def ok(rows: Any) -> None:
        loop.call_soon_threadsafe(_set, fut, rows, None)

    def err(exc: BaseException) -> None:
        wrapped = StorageUnavailable(describe_failure(exc))
        wrapped.__cause__ = exc
        loop.call_soon_threadsafe(_set, fut, None, wrapped)

    rf.add_callbacks(ok, err)
    return fut


def _set(fut: asyncio.Future[Any], rows: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(rows if rows is not None else [])


def describe_failure(exc: BaseException) -> str:
    """One line for a failed request, naming the likely fix."""
    if isinstance(exc, Unavailable):
        return (
            f"not enough Cassandra replicas are up for "
            f"{ConsistencyLevel.value_to_name.get(exc.consistency, exc.consistency)} "
            f"({exc.alive_replicas} alive, {exc.required_replicas} required): bring nodes back, or lower "
            f"cassandra.consistency"
        )
    if isinstance(exc, (WriteTimeout, ReadTimeout, OperationTimedOut)):
        return (
            f"Cassandra did not answer in time ({type(exc).__name__}): the cluster is overloaded or nodes are down; "
            "the request may be retried"
        )
    if isinstance(exc, NoHostAvailable):
        return "no Cassandra node is reachable: start the cluster or check cassandra.contact_points"
    return f"Cassandra request failed: {_short(exc)}"


def _ssl_context(s: CassandraSettings) -> ssl.SSLContext | None:
    if not s.tls.enabled:
        return None
    ctx = ssl.create_default_context(cafile=s.tls.ca_file or None)
    ctx.check_hostname = s.tls.check_hostname
    if s.tls.cert_file:
        ctx.load_cert_chain(s.tls.cert_file, s.tls.key_file or None)
    return ctx


def _where(s: CassandraSettings) -> str:
    return ",".join(f"{h}:{s.port}" for h in s.contact_points)


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def _no_host(s: CassandraSettings, exc: NoHostAvailable) -> StorageUnavailable:
    """Why no node took the connection, as the error to raise. Only rejected credentials are certain to be the
    configuration (``StorageRefused``); a TLS failure or a dropped handshake may also be a node stalling or
    restarting mid-handshake, so a starting process waits on those."""
    text = _short(exc)
    if "AuthenticationFailed" in text or "Bad credentials" in text or "password" in text.lower():
        return StorageRefused(
            f"Cassandra at {_where(s)} rejected the credentials for user '{s.username}': "
            "check cassandra.username and the password"
        )
    if "SSL" in text or "certificate" in text.lower():
        return StorageUnavailable(
            f"TLS handshake with Cassandra at {_where(s)} failed: "
            f"check cassandra.tls.ca_file/cert_file ({_host_errors(exc)})"
        )
    if not s.tls.enabled and _dropped_at_handshake(exc):
        return StorageUnavailable(
            f"Cassandra at {_where(s)} dropped the connection during the handshake: if it requires client encryption, "
            "set cassandra.tls.enabled = true and cassandra.tls.ca_file"
        )
    return StorageUnavailable(
        f"Cassandra is not reachable at {_where(s)}: "
        "start it ('casque cassandra start') or fix cassandra.contact_points/port"
    )


def _host_errors(exc: NoHostAvailable) -> str:
    """Each host's error without the driver's wrapping ("('Unable to connect...', {host: Err(1, 'Tried ...
    Last error: ...')})"), so the line shows the reason, e.g. "certificate verify failed: ..."."""
    reasons = {_short(err).split("Last error: ", 1)[-1] for err in _errors(exc)}
    return "; ".join(sorted(reasons))[:200] or _short(exc)[:200]


def _errors(exc: NoHostAvailable) -> list[Any]:
    """The per-host errors: a dict host -> error, except where the driver gives a list of hosts."""
    errors = exc.errors or {}
    return list(errors.values()) if isinstance(errors, dict) else []


def _dropped_at_handshake(exc: NoHostAvailable) -> bool:
    """A plain-text client talking to a TLS-only port: TCP connects, then the server hangs up."""
    from cassandra.connection import ConnectionShutdown

    errors = _errors(exc)
    return bool(errors) and all(isinstance(e, (ConnectionResetError, ConnectionShutdown)) for e in errors)


def _server_message(exc: InvalidRequest) -> str:
    """Cassandra's own words, without the driver's 'Error from server: code=2200 [Invalid query] message=' frame."""
    text = str(exc)
    return text.split('message="', 1)[-1].rstrip('"') if 'message="' in text else text


class _PrepareFailures(logging.Filter):
    """The driver logs every failed prepare with its traceback; ``Database.prepare`` raises it (or the one-line
    error it stands for) to a caller that reports it, so the driver's record would only say it twice."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Error preparing query")


logging.getLogger("cassandra.cluster").addFilter(_PrepareFailures())
