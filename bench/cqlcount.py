"""Count the CQL work casque really does: requests (round trips) and the reads and writes inside them.

``install()`` observes ``daemon.engine.storage.db.Database`` (``Database.observe``): every request an engine statement
makes goes through ``run`` or ``run_all``,
so the counts come from the code as it runs, not from reading it. A batch is one request holding
several mutations; each statement is classified by its CQL text (SELECT = read, else write;
``IF`` = a lightweight transaction). The per-message ceiling in docs/benchmarks.md divides the
node's measured capacity by these counts.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from types import FrameType
from typing import Any

_WS = re.compile(r"\s+")


@dataclass
class CqlCounts:
    requests: int = 0
    read_requests: int = 0
    write_requests: int = 0
    batch_requests: int = 0
    reads: int = 0  # SELECT statements
    writes: int = 0  # INSERT/UPDATE/DELETE statements, counting each one inside a batch
    lwt: int = 0
    payload_writes: int = 0  # row writes that carry a message's payload (a bound ``payload`` column)
    bytes_written: int = 0  # bytes of the values bound to every write (keys included): what the node must store
    by_statement: Counter = field(default_factory=Counter)  # keyed by CQL text; shortened only when reported
    latency_ms: dict[str, list[float]] = field(default_factory=dict)  # round trips by kind: read / write / batch
    by_caller: Counter = field(
        default_factory=Counter
    )  # engine function that issued it ("sweep.Sweeper.run"); only with BY_CALLER

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)  # (asdict turns a Counter into a Counter *of its pairs*: both are replaced below)
        d.pop("latency_ms")
        d["by_caller"] = dict(self.by_caller.most_common(25))
        d["latency"] = {}
        for kind, samples in self.latency_ms.items():
            s = sorted(samples)
            d["latency"][kind] = (
                {
                    "count": len(s),
                    **{f"p{q}": s[min(len(s) - 1, int(q / 100 * len(s)))] for q in (50, 90, 99)},
                    "max": s[-1],
                }
                if s
                else {}
            )
        short: Counter = Counter()
        for key, n in self.by_statement.items():
            short[_short(key)] += n
        d["by_statement"] = dict(short.most_common(25))
        return d


COUNTS = CqlCounts()
#: Also count requests by the engine function that issued them (a frame walk per request: for the
#: idle daemon, bench/idle.py, where it says which loop costs what; off under load).
BY_CALLER = False
_KIND: dict[str, tuple[bool, bool]] = {}  # CQL text -> (is a read, is an LWT), classified once


def _short(cql: str) -> str:
    """A statement's identity for the breakdown: verb, table and the WHERE shape, without the keyspace. A long
    one keeps its head and its tail: reads of one table differ at the end (an in-place lane's filter, a LIMIT)."""
    batch = cql.startswith("batch: ")
    s = _WS.sub(" ", cql[7:] if batch else cql).strip()
    s = re.sub(r"\b\w+\.(messages|queues|keys|poison|stats|history|daemon_stats)\b", r"\1", s)
    s = re.sub(r"\(([^()]{60,})\)", "(…)", s)
    s = re.sub(r"^SELECT (.{40})[^()]*?(, WRITETIME\(\w+\) AS wt)? FROM", r"SELECT \1…\2 FROM", s)
    if len(s) > 200:
        s = s[:120] + " … " + s[-77:]
    return ("batch: " if batch else "") + s


def _classify(text: str) -> tuple[bool, bool]:
    kind = _KIND.get(text)
    if kind is None:
        up = f" {text.upper()} "
        kind = _KIND[text] = (text.lstrip()[:6].upper() == "SELECT", " IF " in up)
    return kind


MAX_SAMPLES = 200_000


def timed(kind: str, ms: float) -> None:
    samples = COUNTS.latency_ms.setdefault(kind, [])
    if len(samples) < MAX_SAMPLES:
        samples.append(ms)


def _caller() -> str:
    """The innermost daemon function (outside db.py) on the stack: who issued the request."""
    f: FrameType | None = sys._getframe(2)
    while f is not None:
        mod = f.f_globals.get("__name__", "")
        if mod.startswith("daemon.") and mod != "daemon.engine.storage.db":
            return f"{mod.rsplit('.', 1)[-1]}.{f.f_code.co_qualname}"
        if mod.startswith(("asyncio", "uvloop")):  # the bottom of a task's stack: who made the task is not on it
            return "(a task of its own, e.g. asyncio.gather: see the statement)"
        f = f.f_back
    return "other"


def record(stmt: Any, db: Any = None) -> str:
    """Count one request and return its kind (read / write / batch). Cheap (dictionary lookups
    only): it runs inside the daemon under test. ``db`` (the Database that sends it) names a batch's
    prepared members."""
    c = COUNTS
    c.requests += 1
    if BY_CALLER:
        c.by_caller[_caller()] += 1
    inner = getattr(stmt, "_statements_and_parameters", None)
    if inner is not None:  # a BatchStatement: one request, many mutations
        c.batch_requests += 1
        c.write_requests += 1
        c.writes += len(inner)
        for is_prepared, query, values in inner:
            name = (db.statement_text(query) if db is not None else None) or "prepared statement"
            c.by_statement["batch: " + (name if is_prepared else str(query))] += 1
            _count_bytes(c, db.prepared_of(query) if db is not None and is_prepared else None, values)
        return "batch"
    text = _text(stmt)
    is_read, is_lwt = _classify(text)
    if is_read:
        c.read_requests += 1
        c.reads += 1
    else:
        c.write_requests += 1
        c.writes += 1
        _count_bytes(c, getattr(stmt, "prepared_statement", None), getattr(stmt, "values", None))
    if is_lwt:
        c.lwt += 1
    c.by_statement[text] += 1
    return "read" if is_read else "write"


_PAYLOAD_AT: dict[bytes, int] = {}  # prepared query id -> index of its ``payload`` bind marker (-1: none)


def _count_bytes(c: CqlCounts, prepared: Any, values: Any) -> None:
    """Add the serialized bytes bound to one write, and whether it writes a payload. The values of a
    bound statement are already serialized (bytes; UNSET and None write nothing)."""
    if not values:
        return
    c.bytes_written += sum(len(v) for v in values if isinstance(v, bytes))
    if prepared is None:
        return
    at = _PAYLOAD_AT.get(prepared.query_id)
    if at is None:
        names = [col.name for col in prepared.column_metadata or []]
        at = _PAYLOAD_AT[prepared.query_id] = names.index("payload") if "payload" in names else -1
    if 0 <= at < len(values) and isinstance(values[at], bytes):
        c.payload_writes += 1


def _text(stmt: Any) -> str:
    prepared = getattr(stmt, "prepared_statement", None)
    return prepared.query_string if prepared is not None else str(getattr(stmt, "query_string", stmt))


def kind_of(stmt: Any) -> str:
    """read / write / batch, without counting (for callers that keep their own tallies)."""
    if getattr(stmt, "_statements_and_parameters", None) is not None:
        return "batch"
    return "read" if _classify(_text(stmt))[0] else "write"


def snapshot() -> CqlCounts:
    """A copy of the counts (without the latency samples), to subtract later."""
    c = COUNTS
    return CqlCounts(
        c.requests,
        c.read_requests,
        c.write_requests,
        c.batch_requests,
        c.reads,
        c.writes,
        c.lwt,
        c.payload_writes,
        c.bytes_written,
        Counter(c.by_statement),
    )


_INSTALLED: list[Any] = []


def install() -> None:
    """Observe every Database's requests (once per process): count each, and time its round trip."""
    from daemon.engine.storage.db import Database

    if _INSTALLED:
        return

    def observe(db: Any, stmt: Any) -> Any:
        kind = record(stmt, db)
        t0 = time.perf_counter()
        return lambda: timed(kind, (time.perf_counter() - t0) * 1000.0)

    _INSTALLED.append(Database.observe(observe))


#: Every request frame the driver put on the wire, by message type (QueryMessage, ExecuteMessage,
#: BatchMessage, OptionsMessage = heartbeat, PrepareMessage, ...): what the process really sends,
#: including what bypasses the Database (the driver's control connection, heartbeats, paging).
WIRE: Counter = Counter()
_WIRE_LOCK = threading.Lock()  # send_msg runs in the caller's thread and in the driver's reactor thread


def install_wire() -> None:
    """Wrap the driver's ``Connection.send_msg``, the one call every request frame goes through."""
    from cassandra.connection import Connection

    if getattr(Connection.send_msg, "_bench_counted", False):
        return
    original = Connection.send_msg

    def send_msg(self: Any, msg: Any, *args: Any, **kwargs: Any) -> Any:
        with _WIRE_LOCK:
            WIRE[type(msg).__name__] += 1
        return original(self, msg, *args, **kwargs)

    send_msg._bench_counted = True  # type: ignore[attr-defined]
    Connection.send_msg = send_msg


def totals() -> dict[str, Any]:
    """The running totals now (safe from another thread: each counter is copied in one C call)."""
    with _WIRE_LOCK:
        wire = dict(WIRE)
    return {
        "t": time.time(),
        "requests": COUNTS.requests,
        "by_statement": dict(COUNTS.by_statement),
        "by_caller": dict(COUNTS.by_caller),
        "wire": wire,
    }


def rates(
    before: dict[str, Any], after: dict[str, Any], names: dict[str, str] | None = None, top: int = 12
) -> dict[str, Any]:
    """Requests per second between two ``totals()``: on the wire (all, and by message type) and
    through the Database (all, and by statement: the engine's name for it when ``names`` (CQL text
    -> name) has it, else the shortened text)."""
    dt = max(1e-9, after["t"] - before["t"])
    wire = {k: (v - before["wire"].get(k, 0)) / dt for k, v in after["wire"].items() if v - before["wire"].get(k, 0)}
    stmts: Counter = Counter()
    for key, n in after["by_statement"].items():
        d = n - before["by_statement"].get(key, 0)
        if d:
            stmts[(names or {}).get(key) or _short(key)] += d
    callers = {k: (v - before.get("by_caller", {}).get(k, 0)) / dt for k, v in after.get("by_caller", {}).items()}
    return {
        "seconds": dt,
        "wire_per_s": sum(wire.values()),
        "engine_by_caller_per_s": dict(sorted(((k, v) for k, v in callers.items() if v), key=lambda kv: -kv[1])[:top]),
        "wire_by_type_per_s": dict(sorted(wire.items(), key=lambda kv: -kv[1])),
        "engine_per_s": (after["requests"] - before["requests"]) / dt,
        "engine_by_statement_per_s": {k: v / dt for k, v in stmts.most_common(top)},
    }
