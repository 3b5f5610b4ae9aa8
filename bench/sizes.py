"""Throughput by size: casque, pgqueuer and Dramatiq at 5,000, 30,000 and 200,000 no-op tasks each
(``python -m bench --only sizes``; 1,000 / 5,000 / 20,000 in quick mode; section 7b of docs/benchmarks.md).

Why a part of its own: a quick run (5,000 per system) put casque at 0.44-0.61x pgqueuer while the full run
(30,000) said 1.22x, and one size can't tell which describes casque. Each system runs the peers part's workload
(bench/peers.py: sent as fast as its producer allows, one worker process, 32 tasks at once, 200 warm-up tasks
first) at each size, the order of the three rotating from size to size. A system's run time is fitted as
``duration = fixed + n / steady``: ``fixed`` is what a run pays once whatever its size (a start, a warm-up still
settling, the first sends), ``steady`` the rate it keeps; a rate that moves with size with a small residual is a
fixed cost being amortized, one with a large residual a steady rate that changes with the backlog. Both are
printed per system, with its CPU per message at each size, so the reason is read off the run, not guessed.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from .casque_run import RunResult, run_casque
from .env import out_dir, progress, saved_results
from .peers import WARMUP, run_peer, serving
from .peers_postgres import PgQueuerDriver
from .peers_redis import DramatiqDriver

FULL = (5_000, 30_000, 200_000)
QUICK = (1_000, 5_000, 20_000)
CONCURRENCY = 32
SYSTEMS = ("casque", "pgqueuer", "Dramatiq")
#: The issue's targets at every size: casque ÷ system at least this.
TARGETS = {"pgqueuer": 2.0, "Dramatiq": 1.0}
BEGIN, END = "<!-- sizes:begin -->", "<!-- sizes:end -->"


def cpu_ms_per_message(r: RunResult) -> float:
    """The consuming side's CPU per message: casque's daemon and node; a peer's worker and its server."""
    keys = ("daemon_s", "node_s") if r.system == "casque" else ("worker_s", "server_s")
    return 1000.0 * sum(r.cpu.get(k, 0.0) for k in keys) / max(1, r.n)


async def measure(sizes: tuple[int, ...], best: dict[str, Any]) -> list[dict[str, Any]]:
    """Every system at every size, one run each, the order rotating by size."""
    from daemon.engine.client import Casque

    from .env import bench_settings

    cq = await Casque.connect(bench_settings())
    peers = {"pgqueuer": PgQueuerDriver(CONCURRENCY), "Dramatiq": DramatiqDriver(CONCURRENCY)}
    out: list[dict[str, Any]] = []
    try:
        async with serving(list(peers.values())):
            for i, n in enumerate(sizes):
                order = SYSTEMS[i % len(SYSTEMS) :] + SYSTEMS[: i % len(SYSTEMS)]
                for system in order:
                    if system == "casque":
                        r = await run_casque(
                            cq,
                            n,
                            best["consumers"],
                            best["batch_size"],
                            label=f"sizes_casque_{n}",
                            concurrency=CONCURRENCY,
                            warmup=WARMUP,
                            count_cql=False,
                        )
                    else:
                        r = await run_peer(peers[system], n, label=f"sizes_{system}_{n}")
                    cpu = cpu_ms_per_message(r)
                    progress(
                        f"  {system:<9} {n:>8,}  {r.throughput:7.0f} msg/s in {r.duration_s:6.1f} s  "
                        f"(sent at {r.send_rate:.0f}/s, CPU {cpu:.3f} ms/msg)"
                    )
                    out.append(
                        {
                            "system": system,
                            "n": n,
                            "throughput": r.throughput,
                            "duration_s": r.duration_s,
                            "send_rate": r.send_rate,
                            "cpu_ms_per_msg": cpu,
                            "p50_ms": r.latency.p50,
                        }
                    )
    finally:
        await cq.close()
    return out


def fit(points: list[tuple[int, float]]) -> tuple[float, float, float]:
    """``duration = fixed + n / steady`` fitted to (n, duration) points, each weighted by 1/duration² (so a run of
    0.3 s counts as much as one of 40 s: the relative errors are minimized): (fixed s, steady msg/s, the largest
    residual as a fraction of its duration). A steady rate of 0 means the fit found none (a slope ≤ 0)."""
    w = [1.0 / (d * d) for _, d in points]
    sw = sum(w)
    mx = sum(wi * n for wi, (n, _) in zip(w, points)) / sw
    my = sum(wi * d for wi, (_, d) in zip(w, points)) / sw
    sxx = sum(wi * (n - mx) ** 2 for wi, (n, _) in zip(w, points))
    slope = sum(wi * (n - mx) * (d - my) for wi, (n, d) in zip(w, points)) / sxx if sxx else 0.0
    fixed = my - slope * mx
    worst = max(abs(d - (fixed + slope * n)) / d for n, d in points)
    return fixed, (1.0 / slope if slope > 0 else 0.0), worst


def analysis(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per system: its rates by size, the fit, and the CPU per message by size."""
    out: dict[str, dict[str, Any]] = {}
    for system in SYSTEMS:
        runs = sorted((r for r in results if r["system"] == system), key=lambda r: r["n"])
        if not runs:
            continue
        fixed, steady, worst = fit([(r["n"], r["duration_s"]) for r in runs])
        out[system] = {
            "rates": {r["n"]: r["throughput"] for r in runs},
            "cpu": {r["n"]: r["cpu_ms_per_msg"] for r in runs},
            "fixed_s": fixed,
            "steady": steady,
            "residual": worst,
        }
    return out


def why(system: str, a: dict[str, Any]) -> str:
    """One line: does the rate move with size, and what moves it: a fixed cost per run (the fit holds, within
    10%), or the work per message (the CPU per message moves with size)."""
    rates = list(a["rates"].values())
    move = rates[-1] / rates[0] if rates[0] else 0.0
    cpus = list(a["cpu"].values())
    cpu = " -> ".join(f"{c:.3f}" for c in cpus)
    head = f"**{system}**: {rates[0]:,.0f} -> {rates[-1]:,.0f} msg/s from the smallest size to the largest"
    head += f" (x{move:.2f})"
    if abs(move - 1) < 0.15:
        return f"{head}: steady with size (CPU per message {cpu} ms)."
    if a["residual"] <= 0.10 and a["fixed_s"] > 0:
        return (
            f"{head}: a fixed cost of {a['fixed_s']:.2f} s per run, amortized as runs grow, on a steady "
            f"{a['steady']:,.0f} msg/s (fit within {100 * a['residual']:.0f}%; CPU per message {cpu} ms)."
        )
    trend = cpus[-1] / cpus[0] if cpus[0] else 1.0
    if trend > 1.15:
        cause = "more work per message as the backlog grows"
    elif trend < 1 / 1.15:
        cause = "less work per message in bigger runs (a start's cost, bigger batches)"
    else:
        cause = "not the CPU per message, which holds: waiting (I/O, locks, the producer)"
    return (
        f"{head}: not a fixed cost per run (the fit `fixed + n / steady` is off by up to "
        f"{100 * a['residual']:.0f}%); CPU per message {cpu} ms: {cause}."
    )


def section(results: list[dict[str, Any]], at: str) -> str:
    from .report.markdown import _met, _table

    sizes = sorted({r["n"] for r in results})
    rate = {(r["system"], r["n"]): r["throughput"] for r in results}
    lines = [
        "## 7b. Throughput by run size: casque, pgqueuer, Dramatiq (`python -m bench --only sizes`)",
        "",
        f"Run: {at}. casque, pgqueuer and Dramatiq at {', '.join(f'{n:,}' for n in sizes)} no-op tasks each, the "
        "peers part's workload (sent as fast as each producer allows, one worker process, 32 tasks at once, 200 "
        "warm-up tasks first), one run per system and size, the order rotating by size. msg/s = tasks ÷ (last "
        "ack − first send).",
        "",
        _table(
            ["system"] + [f"{n:,}" for n in sizes],
            [[s] + [f"{rate[(s, n)]:,.0f}" if (s, n) in rate else "–" for n in sizes] for s in SYSTEMS],
        ),
        "",
        "![throughput by size](./bench-sizes.png)",
        "",
    ]
    rows = []
    for peer, target in TARGETS.items():
        cells = []
        for n in sizes:
            if (peer, n) in rate and ("casque", n) in rate and rate[(peer, n)]:
                ratio = rate[("casque", n)] / rate[(peer, n)]
                cells.append(f"{ratio:.2f}x {_met(ratio >= target)}")
            else:
                cells.append("–")
        rows.append([f"casque ÷ {peer} (target ≥ {target:g}x)"] + cells)
    lines += [_table(["ratio"] + [f"{n:,}" for n in sizes], rows), ""]
    a = analysis(results)
    lines += [
        "Each system's run time fitted as `duration = fixed + n / steady`, and its CPU per message (casque: daemon "
        "and node; a peer: its worker and its server):",
        "",
        _table(
            ["system", "fixed cost s", "steady msg/s", "worst residual"] + [f"CPU ms/msg at {n:,}" for n in sizes],
            [
                [s, f"{v['fixed_s']:.2f}", f"{v['steady']:,.0f}", f"{100 * v['residual']:.0f}%"]
                + [f"{v['cpu'].get(n, 0):.3f}" for n in sizes]
                for s, v in a.items()
            ],
        ),
        "",
    ]
    lines += [f"- {why(s, v)}" for s, v in a.items()]
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: Path) -> Path:
    from .plots import COLORS, _save, plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for system in SYSTEMS:
        runs = sorted((r for r in results if r["system"] == system), key=lambda r: r["n"])
        ax.plot([r["n"] for r in runs], [r["throughput"] for r in runs], marker="o", label=system, color=COLORS[system])
    ax.set_xscale("log")
    ax.set_xlabel("tasks per run")
    ax.set_ylabel("msg/s")
    ax.set_title("no-op throughput by run size (one worker process each)", fontsize=10)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _run_and_save(path: Path, sizes: tuple[int, ...], best: dict[str, Any]) -> dict[str, Any]:
    progress(f"7b. sizes: {', '.join(SYSTEMS)} at {', '.join(f'{n:,}' for n in sizes)} tasks each")
    saved = {"at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "results": asyncio.run(measure(sizes, best))}
    path.write_text(json.dumps(saved, indent=2))
    return saved


def part(quick: bool, to_docs: bool, best: dict[str, Any], report_only: bool = False) -> int:
    """Measure (unless report_only), save, plot, write the section (docs/benchmarks.md between its markers, or
    bench/out/report-sizes.md)."""
    from .report.markdown import _write_section

    path = out_dir("sizes") / "sizes.json"
    saved = saved_results(path, "sizes") if report_only else _run_and_save(path, QUICK if quick else FULL, best)
    if saved is None:
        return 0
    picture = plot(saved["results"], out_dir() / "bench-sizes.png")
    body = section(saved["results"], saved["at"])
    target = _write_section(body, "report-sizes.md", picture, BEGIN, END, to_docs, before="<!-- sqs-fifo:begin -->")
    progress(f"sizes: results {path}, report {target}")
    return 0
