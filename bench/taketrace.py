"""Loaded INTO the daemon under test (by bench/probe.py, ``BENCH_PROBE_TAKES=1``): how many CQL
round trips one take costs, counted while the real engine runs.

Two things are traced, with the same counter: a *fetch* that took messages (``Consumer.fetch``,
from its first request: the engine's own definition for ``casque_take_round_trips``, so the shards
a round-robin fetch passed empty on the way count), and the *visit* of the row that yielded
(``Consumer._visit_row``, from the peek that found the work to the batch that took it; an engine
that takes some rows outside that method, like a scout's sweep, leaves those out of this level).
Every request is seen through ``Database.observe``, the door every engine statement uses. Requests of one
take issued while another of the same take is still in flight (``asyncio.gather``) share a *wave*:
the waves are the sequential round trips, the figure a message's pickup waits for; the requests
are what the node serves.

An engine that observes its own Prometheus histogram ``casque_take_round_trips`` is read too
(``engine_histogram``); the report prefers it, since the engine knows its own take best.
"""

from __future__ import annotations

import contextvars
import gc
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

HISTOGRAM = "casque_take_round_trips"
MAX_TAKES = 50_000


@dataclass
class Trace:
    """The requests of one visit: which wave each started in, and what each was."""

    inflight: int = 0
    waves: int = 0
    steps: list[tuple[int, Any]] = field(default_factory=list)  # (wave, statement identity)
    t0: float = 0.0
    closed: bool = False  # a task the visit spawned and left running must not add to a recorded take

    def start(self, what: Any) -> None:
        if self.closed:
            return
        if self.inflight == 0:
            self.waves += 1
            if not self.t0:
                self.t0 = time.perf_counter()
        self.inflight += 1
        self.steps.append((self.waves, what))

    def end(self) -> None:
        self.inflight = max(0, self.inflight - 1)


#: The traces open in this task, outermost first: a request counts in each (a fetch and the visit inside it).
_CURRENT: contextvars.ContextVar[tuple[Trace, ...]] = contextvars.ContextVar("bench_take", default=())
#: What is traced: a *fetch* that took messages (from its first request: the definition of the
#: engine's ``casque_take_round_trips``, empty shards passed on the way included), and the *visit*
#: of the row that yielded (from the peek that found the work).
UNITS = {"fetch": "fetch", "visit": "_visit_row"}
TAKES: dict[str, list[dict[str, Any]]] = {level: [] for level in UNITS}
EMPTY: Counter = Counter()
STATE: dict[str, Any] = {"units": {}}


def _identity(stmt: Any) -> Any:
    """A statement's identity, cheap to take in the hot path (named at the end, ``_names``)."""
    if getattr(stmt, "_statements_and_parameters", None) is not None:
        return ("batch", len(stmt._statements_and_parameters))
    prepared = (
        getattr(stmt, "prepared_statement", None) or stmt
    )  # a BoundStatement, or a PreparedStatement run with values
    query_id = getattr(prepared, "query_id", None)
    if query_id is not None:
        return query_id
    return str(getattr(stmt, "query_string", stmt))[:60]


def _observe(db: Any, stmt: Any) -> Any:
    """A request (``Database.observe``): counted in every trace open in the task that sends it."""
    traces = _CURRENT.get()
    if not traces:
        return None
    what = _identity(stmt)
    for trace in traces:
        trace.start(what)

    def done() -> None:
        for trace in traces:
            trace.end()

    return done


def install() -> None:
    from daemon.engine.consume import consumer as cmod
    from daemon.engine.storage import db as dbmod

    dbmod.Database.observe(_observe)
    consumer = getattr(cmod, "Consumer", None)
    for level, method in UNITS.items():
        if hasattr(consumer, method):  # an engine shaped otherwise: only its own histogram (if any) is read
            STATE["units"][level] = f"Consumer.{method}"
            setattr(consumer, method, _traced(level, getattr(consumer, method)))


def _traced(level: str, original: Any) -> Any:
    async def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        trace = Trace()
        token = _CURRENT.set(_CURRENT.get() + (trace,))
        try:
            taken = await original(self, *args, **kwargs)
        finally:
            _CURRENT.reset(token)
            trace.closed = True
        if taken and trace.steps:
            if len(TAKES[level]) < MAX_TAKES:
                TAKES[level].append(
                    {
                        "waves": trace.waves,
                        "requests": len(trace.steps),
                        "messages": len(taken),
                        "steps": list(trace.steps),
                        "ms": (time.perf_counter() - trace.t0) * 1000.0,
                    }
                )
        elif not taken:
            EMPTY[level] += 1
        return taken

    return traced


def prepared_names() -> list[tuple[Any, str, str]]:
    """(query id, CQL text, the attribute that holds it, e.g. ``MessageTable.peek``) of every
    prepared statement, found by looking at every live object once: works for whatever tables the
    engine has. Run once, at exit."""
    from cassandra.query import PreparedStatement

    found: dict[Any, tuple[Any, str, str]] = {}
    for obj in gc.get_objects():
        d = getattr(obj, "__dict__", None)
        if not isinstance(d, dict) or isinstance(obj, type) or type(obj).__module__.startswith("cassandra"):
            # the driver's own objects (futures, bound statements) hold statements too: name them by their owner
            continue
        for attr, value in list(d.items()):
            if isinstance(value, PreparedStatement) and value.query_id not in found:
                found[value.query_id] = (value.query_id, value.query_string, f"{type(obj).__name__}.{attr}")
    return list(found.values())


def _names() -> dict[Any, str]:
    return {qid: name for qid, _, name in prepared_names()}


def _label(what: Any, names: dict[Any, str]) -> str:
    if isinstance(what, tuple) and what and what[0] == "batch":
        return "batch"
    if isinstance(what, bytes):
        return names.get(what, "prepared statement")
    return str(what)


def sequence(steps: list[tuple[int, Any]], names: dict[Any, str]) -> str:
    """'MessageTable.peek → RowLock… ‖ …': waves in order, requests of one wave joined by ‖."""
    waves: dict[int, list[str]] = {}
    for wave, what in steps:
        waves.setdefault(wave, []).append(_label(what, names))
    return " → ".join(
        " ‖ ".join(sorted(set(w))) + (f" ×{len(w)}" if len(w) > 1 and len(set(w)) == 1 else "") for w in waves.values()
    )


def _engine_histogram() -> dict[str, Any] | None:
    """The engine's own ``casque_take_round_trips`` histogram, summed over queues, if it has one."""
    try:
        from daemon.base.metrics import REGISTRY
    except ImportError:
        return None
    for metric in REGISTRY.collect():
        if metric.name != HISTOGRAM:
            continue
        buckets: defaultdict[str, float] = defaultdict(float)  # sample values are floats
        total = count = 0.0
        for s in metric.samples:
            if s.name.endswith("_bucket"):
                buckets[s.labels["le"]] += s.value
            elif s.name.endswith("_sum"):
                total += s.value
            elif s.name.endswith("_count"):
                count += s.value
        return {"count": count, "sum": total, "mean": total / count if count else None, "buckets": dict(buckets)}
    return None


def summary() -> dict[str, Any]:
    """What the probe writes at exit: per level, the distributions and the usual sequences; the histogram."""
    names = _names()
    levels: dict[str, Any] = {}
    for level, takes in TAKES.items():
        if level not in STATE["units"]:
            continue
        seqs: Counter = Counter(sequence(t["steps"], names) for t in takes)
        levels[level] = {
            "unit": STATE["units"][level],
            "takes": len(takes),
            "empty": EMPTY[level],
            "waves": [t["waves"] for t in takes],
            "requests": [t["requests"] for t in takes],
            "messages": [t["messages"] for t in takes],
            "take_ms": [round(t["ms"], 3) for t in takes],
            "sequences": [{"count": n, "waves": s.count(" → ") + 1, "steps": s} for s, n in seqs.most_common(6)],
        }
    return {"levels": levels, "engine_histogram": _engine_histogram()}
