"""Part 1: end-to-end throughput and latency of one daemon on the local node.

The sweep runs every (consumers, batch size) pair of the plan on a fresh queue with N no-op
messages sent as fast as the producer can. Because the machine is shared, single runs are noisy:
the best few settings and the current defaults are then run again, interleaved, and the setting
with the best *median* wins. Finally the winner runs at half of its measured maximum rate, where
latency (not queueing behind a backlog) is what the numbers show.
"""

from __future__ import annotations

import statistics
from typing import Any

from daemon.base.config import WorkerSettings
from daemon.engine.client import Casque

from .casque_run import RunResult, run_casque
from .env import progress
from .plan import Plan
from .stats import cdf_points


def _line(r: RunResult) -> str:
    lat = r.latency
    return (
        f"{r.label:<28} {r.throughput:8.0f} msg/s (sent at {r.send_rate:6.0f}/s)  send→start p50 {lat.p50:7.1f} ms  "
        f"p99 {lat.p99:7.1f} ms  max {lat.max:7.1f} ms"
    )


async def sweep(cq: Casque, plan: Plan) -> dict[str, Any]:
    defaults = WorkerSettings()
    grid: list[RunResult] = []
    total = len(plan.sweep_consumers) * len(plan.sweep_batches)
    progress(f"1. end to end: sweeping {total} settings, {plan.sweep_n:,} messages each")
    for c in plan.sweep_consumers:
        for b in plan.sweep_batches:
            r = await run_casque(cq, plan.sweep_n, c, b, label=f"sweep_c{c}_b{b}")
            grid.append(r)
            progress("  " + _line(r))
    ranked = sorted(grid, key=lambda r: -r.throughput)
    candidates: list[tuple[int, int]] = []
    for r in ranked[: plan.confirm_top]:
        candidates.append((r.settings["consumers"], r.settings["batch_size"]))
    default = (defaults.consumers, defaults.batch_size)
    confirm: list[RunResult] = []
    if plan.confirm_repeats:
        if default not in candidates:
            candidates.append(default)
        progress(
            f"  confirming {len(candidates)} settings × {plan.confirm_repeats}, {plan.confirm_n:,} messages each "
            "(interleaved)"
        )
        for rep in range(plan.confirm_repeats):
            for c, b in candidates:
                r = await run_casque(cq, plan.confirm_n, c, b, label=f"confirm{rep + 1}_c{c}_b{b}")
                confirm.append(r)
                progress("  " + _line(r))
        medians = {
            cb: statistics.median(
                r.throughput for r in confirm if (r.settings["consumers"], r.settings["batch_size"]) == cb
            )
            for cb in candidates
        }
    else:
        medians = {(r.settings["consumers"], r.settings["batch_size"]): r.throughput for r in grid}
    best = max(medians, key=lambda cb: medians[cb])
    pool = [r for r in (confirm or grid) if (r.settings["consumers"], r.settings["batch_size"]) == best]
    best_run = sorted(pool, key=lambda r: r.throughput)[
        (len(pool) - 1) // 2
    ]  # the median run (the slower of two), not the luckiest
    default_runs = [r for r in (confirm or grid) if (r.settings["consumers"], r.settings["batch_size"]) == default]
    progress(f"  best: {best[0]} consumers, batch {best[1]}: median {medians[best]:.0f} msg/s")
    return {
        "grid": [r.as_dict() for r in grid],
        "confirm": [r.as_dict() for r in confirm],
        "medians": [{"consumers": c, "batch_size": b, "throughput": t} for (c, b), t in medians.items()],
        "best": {"consumers": best[0], "batch_size": best[1], "throughput": medians[best]},
        "defaults": {
            "consumers": default[0],
            "batch_size": default[1],
            "throughput": statistics.median(r.throughput for r in default_runs) if default_runs else None,
        },
        "best_run": best_run.as_dict(),
        "best_cdf": cdf_points(best_run.samples_ms),
    }


async def half_load(cq: Casque, plan: Plan, best: dict[str, Any]) -> dict[str, Any]:
    rate = max(50.0, best["throughput"] / 2)
    n = int(rate * plan.half_load_seconds)
    progress(f"1b. half load: {rate:.0f} msg/s offered for {plan.half_load_seconds:.0f}s ({n:,} messages)")
    r = await run_casque(cq, n, best["consumers"], best["batch_size"], label="half_load", rate=rate)
    progress("  " + _line(r))
    return {"run": r.as_dict(), "cdf": cdf_points(r.samples_ms)}
