"""The Summary at the top of the engine run's section: one row per target of issue 15 (bench/targets.py)
beside the "before" baseline (bench/baseline.py), the earlier issues' targets, and the header saying
where the numbers come from."""

from __future__ import annotations

import statistics
from typing import Any

from .. import baseline, targets
from .markdown import _met, _n, _table


def tomb_ratios(t: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """Poll cost at the end ÷ at the start: tombstones (last ÷ first checkpoint), and peek latency as the
    median of the last three checkpoints ÷ the first three (one probe's latency swings with the machine)."""
    pts = t["casque"]
    if len(pts) < 2:
        return None, None, None
    first, last = pts[0], pts[-1]
    ts = last["tombstones_peek_median"] / first["tombstones_peek_median"] if first["tombstones_peek_median"] else None
    k = min(3, len(pts) // 2) or 1
    head = statistics.median(p["peek_ms"] for p in pts[:k])
    tail = statistics.median(p["peek_ms"] for p in pts[-k:])
    return ts, (tail / head if head else None), (last["peek_ms"] / first["peek_ms"] if first["peek_ms"] else None)


PLACEHOLDER = (
    "_Reason not written yet: write it by hand in bench/why-issue15.toml under `{key}` and re-render "
    "(`python -m bench --report-only`)._"
)


def summary(R: dict[str, Any]) -> str:
    """One row per issue-15 target (before, this run, met or missed), the earlier targets, and the
    reason for every miss."""
    f = targets.figures(R)
    base = baseline.load() or {}
    bf = base.get("figures", {})
    why = targets.reasons()
    rows: list[list[str]] = []
    misses: list[str] = []
    for t in targets.TARGETS:
        now = t.show(f)
        ok = t.met(f, bf) if now is not None else None
        rows.append([t.text, (t.show(bf) if bf else None) or "–", now or "not measured in this run", _met(ok)])
        if ok is False:
            facts = t.facts(f)
            misses.append(
                f"- **{t.text}**: {now}{'; ' + facts if facts else ''}. "
                + (why.get(t.key) or PLACEHOLDER.format(key=t.key))
            )
    rows += earlier_targets(R)
    out = [_table(["target", "before (baseline)", "measured in this run", ""], rows), ""]
    if base:
        out += [
            f"Before: bench/baseline-issue15.json, measured on casque {base.get('engine', '?')} in "
            f"{base.get('mode', '?')} mode on "
            f"{base.get('date', '?')} (load average {base.get('load_at_start', '?')} at its start). A quick run is "
            "smaller (fewer messages, "
            "shorter runs, one round of peers) and its equal-load rate is half the slowest peer's maximum *in that "
            "run*: compare "
            "the two columns with that in mind.",
            "",
        ]
    if misses:
        out += ["Why each missed target was missed:", "", *misses, ""]
    return "\n".join(out)


def earlier_targets(R: dict[str, Any]) -> list[list[str]]:
    """Targets of the issues before 15, still measured: faster than Celery and arq, flat poll cost."""
    rows: list[list[str]] = []
    tomb, peers = R.get("tomb"), R.get("peers")
    if peers:
        r = peers["ratios"]
        ok = all(r.get(k, 0) > 1 for k in ("Celery", "arq"))
        rows.append(
            [
                "(earlier) faster than Celery and arq, same run",
                "–",
                "casque / Celery = " + _n(r.get("Celery"), 2) + "×, casque / arq = " + _n(r.get("arq"), 2) + "×",
                _met(ok),
            ]
        )
    if tomb:
        first, last = tomb["casque"][0], tomb["casque"][-1]
        ts, lat3, lat1 = tomb_ratios(tomb)
        ok_ts = None if ts is None else ts <= 1.2
        ok_lat = None if lat3 is None else lat3 <= 1.2
        verdict = _met(ok_ts) if ok_ts == ok_lat else f"{_met(ok_ts)} (tombstones), {_met(ok_lat)} (latency)"
        rows.append(
            [
                f"(earlier) poll cost after {_n(tomb['messages'])} messages within 1.2× of fresh",
                "–",
                f"tombstones per poll (median shard) {_n(first['tombstones_peek_median'])} → "
                f"{_n(last['tombstones_peek_median'])} (×{_n(ts, 2)}); "
                f"peek latency ×{_n(lat3, 2)} (median of the last three checkpoints ÷ the first three; last ÷ first "
                f"alone ×{_n(lat1, 2)})",
                verdict,
            ]
        )
    return rows


def header(R: dict[str, Any]) -> str:
    m = R.get("meta", {})
    mach = m.get("machine", {})
    v = m.get("versions", {})
    lines = [
        f"Run: **{m.get('mode', '?')} mode**, {mach.get('date', '?')}, {m.get('duration_min', 0):.0f} min. "
        f"Machine: {mach.get('cpu', '?')}, {mach.get('memory', '?')}, {mach.get('os', '?')}; load average "
        f"{mach.get('load_at_start', '?')} at the start "
        "(the machine is shared with other engineers' test runs: compare ratios within this run, not absolute numbers "
        "across runs).",
        "",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + ".",
    ]
    for r in m.get("reruns", []):
        lines += [
            "",
            f"Re-run after the {m.get('mode', '?')} run: part(s) {', '.join(r['parts'])} on {r['date']} "
            f"({r.get('duration_min', 0):.0f} min, "
            f"load average {r.get('load_at_start', '?')} at its start){': ' + r['why'] if r.get('why') else ''}.",
        ]
    return "\n".join(lines)
