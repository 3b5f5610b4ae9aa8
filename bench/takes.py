"""Part "takes": how many sequential CQL round trips a take costs, at low load.

One daemon (default ``[worker]`` settings) on a fresh 16-shard queue; messages are offered one at
a time at a low rate, so nearly every take finds one message that just became due: the path the
pickup latency is made of. Inside the daemon, bench/taketrace.py follows every fetch that took
messages and every visit of the row that yielded, and counts their requests and their sequential
round trips. If the engine observes its own ``casque_take_round_trips`` histogram, that is read
too, and the Summary prefers it. The send→start latency of the same messages is kept beside it.
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
    return {
        "count": len(s),
        "mean": statistics.fmean(s),
        "p50": percentile(s, 50),
        "p90": percentile(s, 90),
        "max": s[-1],
    }


async def run(cq: Casque, plan: Plan) -> dict[str, Any]:
    from daemon.base.config import WorkerSettings

    w = WorkerSettings()
    rate, n = plan.takes_rate, int(plan.takes_rate * plan.takes_seconds)
    progress(
        f"takes: {n} messages offered at {rate:.0f} msg/s, one daemon ({w.consumers} consumers), round trips of every "
        "take"
    )
    r = await run_casque(
        cq,
        n,
        w.consumers,
        w.batch_size,
        label="takes",
        rate=rate,
        probe_env={"BENCH_PROBE_TAKES": "1"},
        keep=("takes",),
    )
    t = r.probe.get("takes") or {}
    levels: dict[str, dict[str, Any]] = {}
    for level, v in (t.get("levels") or {}).items():
        levels[level] = {
            "unit": v["unit"],
            "takes": v["takes"],
            "empty": v["empty"],
            "waves": _dist(v["waves"]),
            "requests": _dist(v["requests"]),
            "messages": _dist(v["messages"]),
            "take_ms": _dist(v["take_ms"]),
            "sequences": v["sequences"],
        }
    out: dict[str, Any] = {
        "rate": rate,
        "n": n,
        "acked": r.cql.get("acked"),
        "levels": levels,
        "engine_histogram": t.get("engine_histogram"),
        "latency": r.latency.as_dict(),
        "settings": r.settings,
    }
    lat = Latency.from_dict(out["latency"])
    progress(f"  send→start p50 {lat.p50:.1f} ms p99 {lat.p99:.1f} ms")
    for level, v in levels.items():
        wv, rq = v["waves"], v["requests"]
        progress(
            f"  {level:<5} ({v['unit']}): {v['takes']} takes, round trips mean {_f(wv['mean'])} p50 {wv['p50']} p90 "
            f"{wv['p90']} max {wv['max']}; "
            f"requests mean {_f(rq['mean'])}"
        )
        for s in v["sequences"][:2]:
            progress(f"    {s['count']:5d} × {s['waves']} round trips: {s['steps']}")
    h = out["engine_histogram"]
    if h:
        progress(f"  engine histogram casque_take_round_trips: mean {_f(h['mean'])} over {h['count']:.0f} takes")
    return out


def _f(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"
