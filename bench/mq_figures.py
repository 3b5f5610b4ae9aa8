"""The many-queues scenario's figures (bench/many_queues.py): CQL per SQS request, send→receive latency,
the server's CPU share and its RSS as queues are touched, computed from the ledger and the samples after
the run, so that measuring and reporting stay out of the phases.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from .mq_host import pct
from .mq_ledger import Ledger
from .mq_serve import Sample, Server


def reads_figures(server: Server) -> dict[str, Any]:
    """CQL per SQS request, summed over the server's processes (the killed one up to its last write)."""
    total = {k: [0, 0, 0] for k in ("receive", "empty_long_poll", "empty_receive", "send", "delete", "other")}
    cql_requests = cql_reads = 0
    for s in server.finished:
        cql_requests += s.get("cql_requests", 0)
        cql_reads += s.get("cql_reads", 0)
        for k, v in (s.get("tally") or {}).items():
            total[k] = [a + b for a, b in zip(total[k], v)]
    per = {
        k: {
            "requests": v[0],
            "cql_per_request": v[1] / v[0] if v[0] else None,
            "reads_per_request": v[2] / v[0] if v[0] else None,
        }
        for k, v in total.items()
    }
    charged = sum(v[2] for v in total.values())
    last = server.finished[-1] if server.finished else {}
    return {
        "by_kind": per,
        "cql_requests": cql_requests,
        "cql_reads": cql_reads,
        "reads_outside_requests": cql_reads - charged,
        "cql_latency_ms": last.get("cql_latency_ms", {}),
    }


def latency_figures(ledger: Ledger, kill_at: float | None, back_at: float | None, wait_s: int) -> dict[str, Any]:
    """send → first receive of live messages to online owners; "calm" leaves out those sent while a
    poll that the kill cut off could have held them (they come back only after the visibility timeout)."""
    every, calm = [], []
    for mid, (_, at, online) in ledger.sent.items():
        if not online or mid not in ledger.first_seen:
            continue
        ms = (ledger.first_seen[mid] - at) * 1000
        every.append(ms)
        near_kill = kill_at is not None and back_at is not None and kill_at - wait_s - 1 <= at <= back_at + 1
        if not near_kill:
            calm.append(ms)
    return {
        "count": len(every),
        "p50_ms": pct(every, 50),
        "p99_ms": pct(every, 99),
        "max_ms": max(every) if every else None,
        "calm_count": len(calm),
        "calm_p50_ms": pct(calm, 50),
        "calm_p99_ms": pct(calm, 99),
    }


def cpu_share(samples: list[Sample], phase: str) -> float | None:
    """The server's CPU use in a phase, in % of one core (each process's samples counted apart)."""
    cpu = wall = 0.0
    for inc in {s.incarnation for s in samples}:
        mine = [s for s in samples if s.incarnation == inc and s.phase == phase]
        if len(mine) > 1:
            cpu += mine[-1].cpu_s - mine[0].cpu_s
            wall += mine[-1].t - mine[0].t
    return 100 * cpu / wall if wall else None


def rss_figures(samples: list[Sample]) -> dict[str, Any]:
    """The last incarnation's RSS as the queues it has seen grow: the drain sweep takes it to N."""
    if not samples:
        return {}
    last = [s for s in samples if s.incarnation == samples[-1].incarnation]
    top = max(s.touched for s in last) or 1
    at: dict[str, Any] = {}
    for frac in (0.25, 0.5, 0.75, 1.0):
        near = [s.rss_mb for s in last if s.touched >= frac * top]
        at[f"{int(frac * 100)}%"] = near[0] if near else None
    half, full = at.get("50%"), at.get("100%")
    return {
        "cpu_pct": {phase: cpu_share(samples, phase) for phase in ("live", "noisy", "drain", "idle")},
        "queues_touched": top,
        "rss_mb_at": at,
        "growth_second_half_mb": (full - half) if half is not None and full is not None else None,
        "peak_mb": max(s.rss_mb for s in samples),
        "samples": [asdict(s) for s in samples],
    }
