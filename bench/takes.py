"""Part "takes": how many sequential CQL round trips a take costs (issue 15), at low load.

One daemon (default ``[worker]`` settings) on a fresh 16-shard queue; messages are offered one at
a time at a low rate, so nearly every take finds one message that just became due: the path the
pickup latency is made of. Inside the daemon, bench/taketrace.py follows every take (the visit of
a row that returned messages) and counts its requests and its *waves* (requests issued while
another of the same take is in flight share a wave): waves are the round trips a message waits
for. If the engine observes its own ``casque_take_round_trips`` histogram, that is read too, and
the report prefers it. The send→start latency of the same messages is kept beside it.
"""

from __future__ import annotations

import statistics
from typing import Any

from daemon.engine.client import Casque

from .casque_run import run_casque
from .env import progress
from .plan import Plan
from .stats import Latency, percentile


def _dist(values: list[float]) -> dict[str, float | None]:
    s = sorted(values)
    if not s:
        return {"count": 0, "mean": None, "p50": None, "p90": None, "max": None}
    return {"count": len(s), "mean": statistics.fmean(s), "p50": percentile(s, 50), "p90": percentile(s, 90), "max": s[-1]}


async def run(cq: Casque, plan: Plan) -> dict[str, Any]:
    from daemon.base.config import WorkerSettings

    w = WorkerSettings()
    rate, n = plan.takes_rate, int(plan.takes_rate * plan.takes_seconds)
    progress(f"takes: {n} messages offered at {rate:.0f} msg/s, one daemon ({w.consumers} consumers), round trips of every take")
    r = await run_casque(cq, n, w.consumers, w.batch_size, label="takes", rate=rate, probe_env={"BENCH_PROBE_TAKES": "1"}, keep=("takes",))
    t = r.probe.get("takes") or {}
    out = {
        "rate": rate, "n": n, "acked": r.cql.get("acked"), "unit": t.get("unit"), "takes": t.get("takes", 0),
        "empty_visits": t.get("empty_visits", 0),
        "waves": _dist(t.get("waves", [])), "requests": _dist(t.get("requests", [])), "messages": _dist(t.get("messages", [])),
        "take_ms": _dist(t.get("take_ms", [])), "sequences": t.get("sequences", []), "engine_histogram": t.get("engine_histogram"),
        "latency": r.latency.as_dict(), "settings": r.settings,
    }
    wv, rq, lat = out["waves"], out["requests"], Latency.from_dict(out["latency"])
    progress(f"  {out['takes']} takes: round trips (waves) p50 {wv['p50']} p90 {wv['p90']} max {wv['max']}; requests p50 {rq['p50']}; "
             f"send→start p50 {lat.p50:.1f} ms p99 {lat.p99:.1f} ms")
    for s in out["sequences"][:3]:
        progress(f"    {s['count']:5d} × {s['waves']} waves: {s['steps']}")
    h = out["engine_histogram"]
    if h:
        progress(f"  engine histogram casque_take_round_trips: mean {h['mean']} over {h['count']:.0f} takes")
    return out
