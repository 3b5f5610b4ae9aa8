"""The run's report: faults by kind, messages by kind, lost, duplicates (explained and not), order violations,
latency p50/p99 outside and inside fault windows, time to drain after the last fault; as JSON
(bench/out/nemesis/<seed>/report.json) and as markdown, with the first violation and the seed that reproduces it."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .check import Findings
from .faults import Window
from .schedule import Fault


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _latency(values: list[tuple[float, bool]]) -> dict[str, Any]:
    """p50 and p99 (ms) of the latencies outside and inside fault windows."""
    out: dict[str, Any] = {}
    for name, flag in (("outside", False), ("inside", True)):
        v = [s for s, i in values if i == flag]
        p50, p99 = percentile(v, 0.5), percentile(v, 0.99)
        out[name] = {
            "n": len(v),
            "p50_ms": None if p50 is None else round(p50 * 1000),
            "p99_ms": None if p99 is None else round(p99 * 1000),
        }
    return out


def build(
    seed: int,
    minutes: float,
    plan: list[Fault],
    windows: list[Window],
    f: Findings,
    drain_s: float,
    notes: dict[str, Any],
) -> dict[str, Any]:
    explained = Counter(d.explained_by for d in f.duplicates if d.explained_by)
    unexplained = [d for d in f.duplicates if not d.explained_by]
    lat = _latency([(s, i) for s, i, _ in f.latencies])
    by_kind = {
        k: _latency([(s, i) for s, i, w in f.latencies if w == k]) for k in sorted({w for _, _, w in f.latencies})
    }
    return {
        "seed": seed,
        "minutes": minutes,
        "faults_planned": len(plan),
        "faults_by_kind": dict(Counter(w.fault.kind for w in windows)),
        "messages_by_kind": {k.removeprefix("sent "): v for k, v in sorted(f.counts.items()) if k.startswith("sent ")},
        "counts": {k: v for k, v in sorted(f.counts.items()) if not k.startswith("sent ")},
        "lost": sum(f.lost.values()),
        "lost_by_kind": dict(f.lost),
        "duplicates": len(f.duplicates),
        "duplicates_by_where": dict(Counter(d.where for d in f.duplicates)),
        "duplicates_explained": dict(explained),
        "duplicates_unexplained": len(unexplained),
        "unexplained_examples": [asdict(d) for d in unexplained[:10]],
        "order_violations": f.counts.get("fifo groups out of order", 0)
        + f.counts.get("daemon fifo groups out of order", 0)
        + sum(v.what == "fifo in flight" for v in f.violations),
        "latency": lat,
        "latency_by_kind": by_kind,
        "drain_after_last_fault_s": round(drain_s, 1),
        "violations": len(f.violations),
        "violation_kinds": dict(Counter(v.what for v in f.violations)),
        "first_violation": asdict(f.violations[0]) if f.violations else None,
        "all_violations": [asdict(v) for v in f.violations[:50]],
        "windows": [
            {
                "kind": w.fault.kind,
                "target": w.fault.target,
                "planned_at": w.fault.at,
                "took_s": round(w.end - w.start, 1),
                "start": round(w.start, 2),
                "end": round(w.end, 2),
                "note": w.note,
            }
            for w in windows
        ],
        "notes": notes,
    }


def markdown(r: dict[str, Any]) -> str:
    lines = [f"## nemesis: seed {r['seed']}, {r['minutes']} min", ""]
    lines += ["| fault | count |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in sorted(r["faults_by_kind"].items())]
    lines += ["", "| messages | sent |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in r["messages_by_kind"].items()]
    lat = r["latency"]
    lines += [
        "",
        f"- lost: **{r['lost']}** {r['lost_by_kind'] or ''}",
        f"- duplicates: {r['duplicates']} ({r['duplicates_by_where']}); explained {r['duplicates_explained']}; "
        f"unexplained **{r['duplicates_unexplained']}**",
        f"- order violations (FIFO groups out of order over SQS and in the daemons, two of a group in flight): "
        f"**{r['order_violations']}**",
        f"- latency outside fault windows: p50 {lat['outside']['p50_ms']} ms, p99 {lat['outside']['p99_ms']} ms "
        f"({lat['outside']['n']}); inside: p50 {lat['inside']['p50_ms']} ms, p99 {lat['inside']['p99_ms']} ms "
        f"({lat['inside']['n']})",
        f"- drained {r['drain_after_last_fault_s']} s after the last fault ended",
        "- latency by kind (p50/p99 ms outside | inside fault windows): "
        + "; ".join(
            f"{k} {v['outside']['p50_ms']}/{v['outside']['p99_ms']} | {v['inside']['p50_ms']}/{v['inside']['p99_ms']}"
            for k, v in r["latency_by_kind"].items()
        ),
        f"- other counts: {r['counts']}",
        f"- violations: **{r['violations']}** {r['violation_kinds'] or ''}",
        f"- faults planned {r['faults_planned']}, made {sum(r['faults_by_kind'].values())}, dropped "
        f"{r['notes'].get('faults_dropped', 0)} (their lane ran past the run's end behind slow restarts), "
        f"could not be made {len(r['notes'].get('fault_errors', []))}",
    ]
    lines += [f"  - {v['what']}: {v['detail'][:200]}" for v in r["all_violations"][:20]]
    if r["unexplained_examples"]:  # enough to trace each: when both deliveries ran, beside when each fault did
        lines += ["", "unexplained duplicates (first and second delivery, wall clock s):"]
        lines += [
            f"  - {d['where']} {d['label']}: {d['first']:.2f} / {d['second']:.2f}" for d in r["unexplained_examples"]
        ]
        lines += ["fault windows:"]
        lines += [f"  - {w['kind']} {w['target']}: {w['start']:.2f} - {w['end']:.2f} {w['note']}" for w in r["windows"]]
    v = r["first_violation"]
    if v:
        lines += ["", f"first violation ({v['what']}): {v['detail']}", "", "```", *v["context"][:40], "```"]
        lines += [f"reproduce: python -m bench nemesis --minutes {r['minutes']} --seed {r['seed']}"]
    return "\n".join(lines) + "\n"


def write(r: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(r, indent=1, default=str))
