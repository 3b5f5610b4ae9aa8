"""How long the many-queues scenario would take at full size on this machine (bench/many_queues.py), phase
by phase, from a run's own rates (or, before any run, from the rates a medium run measured here), so that
the figure printed at the start and written in the report is one that adds up the phases as they now are.

What scales with what at full size: create and fill with the queue and message counts; the owners'
catch-up with the users; the live phase and the idle minute are fixed times; the noisy phase with its
backlog; the drain with the queues it visits (every queue the ledger still has messages in, at most the
queues a Zipf fill of M messages over N queues reaches, about ``busy_queues(N, M)``, and the users' own;
then two samples: queues drained before, checked empty, and idle queues), then one re-check after a
visibility timeout of what is still owed and of a sample.
"""

from __future__ import annotations

import math
from typing import Any

from .mq_sizes import FULL, Size

#: rates the medium run measured on this box (bench/out/many-queues-medium.json, 2026-11-25 08:34 UTC, load
#: average 2-12 from other engineers' runs), for the estimate printed before a run has measured its own.
#: create: the LWT path (996/s that run); the bulk create path (>= 10,000/s) takes 16.7 min off
HERE = {
    "create_rate": 996.0,
    "fill_rate": 4_172.0,
    "catch_up_s_per_user": 0.0054,
    "noisy_fill_rate": 8_888.0,
    "noisy_drain_rate": 332.0,
    "sweep_s_per_queue": 0.0102,
    "recheck_s_per_queue": 0.0024,
    "restart_s": 1.2,
}


def busy_queues(queues: int, messages: int, s: float) -> float:
    """Expected queues that get at least one of ``messages`` Zipf(s) draws over ``queues`` ranks."""
    h = sum(1.0 / r**s for r in range(1, queues + 1))
    return sum(1.0 - math.exp(-messages / (h * r**s)) for r in range(1, queues + 1))


def rates(R: dict[str, Any]) -> dict[str, float]:
    """This run's rates, in the units of ``HERE``."""
    d, n, live, z = R["drain"], R.get("noisy") or {}, R.get("live") or {}, R["size"]
    recheck_s = max(0.0, d["seconds"] - d["sweep_seconds"] - z["visibility_s"] - 1)
    out = {
        "create_rate": R["create"]["rate"],
        "fill_rate": R["fill"]["rate"],
        "catch_up_s_per_user": live.get("catch_up_s", 0.0) / max(1, z["users"]),
        "sweep_s_per_queue": d["sweep_seconds"] / max(1, d.get("swept", z["queues"])),
        "recheck_s_per_queue": recheck_s / max(1, d.get("queues_rechecked", 1)),
        "restart_s": (R.get("kill") or {}).get("down_s") or HERE["restart_s"],
    }
    if n:
        out["noisy_fill_rate"], out["noisy_drain_rate"] = n["fill_rate"], n["drain_rate"]
    return {**HERE, **out}


def phases_s(r: dict[str, float], size: Size = FULL) -> dict[str, float]:
    """Seconds per phase at ``size`` with rates ``r``."""
    busy = busy_queues(size.queues, size.messages, size.zipf_s) + size.users  # an upper bound: drained ones
    sample = min(size.idle_sample, size.queues)  # checked (busy, left empty) and idle: each a sample this big
    probes_s = size.noisy_probes * 0.1  # a probe and its gap, when A's queue is empty
    return {
        "create": size.queues / r["create_rate"],
        "fill": size.messages / r["fill_rate"],
        "catch_up": size.users * r["catch_up_s_per_user"],
        "live": size.live_s + size.ramp_s + size.wait_s + r["restart_s"],  # + the users' last polls
        "noisy": probes_s + size.noisy_backlog / r["noisy_fill_rate"] + size.noisy_backlog / r["noisy_drain_rate"],
        "drain": (busy + 2 * sample) * r["sweep_s_per_queue"]
        + size.visibility_s
        + 1
        + sample * r["recheck_s_per_queue"],
        "idle": size.idle_s + size.settle_s,
        "table_stats": 60.0,  # nodetool flush + tablestats, before and after the creates
    }


def full_estimate_min(R: dict[str, Any] | None = None) -> float:
    """Minutes the full size would take here: from this run's rates, or (None) from ``HERE``."""
    return sum(phases_s(rates(R) if R else HERE).values()) / 60
