"""Cassandra's own account of a read: tombstone cells scanned (query tracing) and its latency.

Tracing is the node's word, not ours: the trace of a read has one event per SSTable/memtable pass
("Read N live rows and M tombstone cells"), and the sum of M is what the read walked over. Latency
is measured separately, untraced, as the median of several client-side round trips.
"""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import dataclass
from typing import Any

from cassandra.cluster import Session

_READ = re.compile(r"Read (\d+) live rows? and (\d+) tombstone cells?")
_MERGED = re.compile(r"Merg(?:ed|ing) data from memtables and (\d+) sstables?")


@dataclass
class ReadCost:
    tombstones: int
    live: int
    trace_us: int  # the coordinator's duration in the trace
    latency_ms: float  # median client round trip, untraced
    failed: str = ""  # e.g. the node aborted the read (TombstoneOverwhelmingException)
    sstables: int = -1  # how many SSTables the read merged (read amplification), from the trace


def measure(session: Session, stmt: Any, params: list[Any], repeats: int = 15) -> ReadCost:
    try:
        rs = session.execute(stmt, params, trace=True, timeout=60)
        trace = rs.get_query_trace(max_wait_sec=15)
    except Exception as exc:  # the node refusing the read is the result, not an error of the bench
        return ReadCost(-1, -1, -1, float("nan"), failed=_reason(exc))
    live = dead = 0
    sstables = -1
    for e in trace.events:
        m = _READ.search(e.description or "")
        if m:
            live += int(m.group(1))
            dead += int(m.group(2))
        merged = _MERGED.search(e.description or "")
        if merged:
            sstables = max(sstables, int(merged.group(1)))
    duration = int(trace.duration.total_seconds() * 1e6) if trace.duration else -1
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        session.execute(stmt, params, timeout=60)
        times.append((time.perf_counter() - t0) * 1000)
    return ReadCost(dead, live, duration, statistics.median(times), sstables=sstables)


def _reason(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    if "TombstoneOverwhelming" in text or "tombstone" in text.lower():
        return "aborted by the node: too many tombstones (tombstone_failure_threshold)"
    return text[:160]
