"""The Summary at the top of the engine run's section: one row per target (bench/targets.py), beside an earlier
run's figures when ``python -m bench --compare FILE`` names one, the earlier targets, and the header saying where
the numbers come from and on what node."""

from __future__ import annotations

import statistics
from typing import Any

from .. import targets
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


def compared(before: dict[str, Any] | None) -> str:
    """How the "before" column names the earlier run (``python -m bench --compare FILE``)."""
    m = (before or {}).get("meta", {})
    return (
        f"before: {m.get('mode', '?')} run of {m.get('machine', {}).get('date', '?')} "
        f"(casque {m.get('versions', {}).get('casque', '?')})"
    )


def summary(R: dict[str, Any], before: dict[str, Any] | None = None) -> str:
    """One row per target (this run, met or missed; the earlier run's value beside it with ``--compare``),
    the earlier targets, and the facts of every miss."""
    f = targets.figures(R)
    bf = targets.figures(before) if before else {}
    rows: list[list[str]] = []
    misses: list[str] = []
    for t in targets.TARGETS:
        now = t.show(f)
        ok = t.met(f, bf) if now is not None else None
        row = [t.text, now or "not measured in this run", _met(ok)]
        rows.append([row[0], t.show(bf) or "–", *row[1:]] if before else row)
        if ok is False:
            facts = t.facts(f)
            misses.append(f"- **{t.text}**: {now}{'; ' + facts if facts else ''}.")
    rows += [[r[0], "–", *r[1:]] if before else r for r in earlier_targets(R)]
    head = (
        ["target", compared(before), "measured in this run", ""] if before else ["target", "measured in this run", ""]
    )
    out = [_table(head, rows), ""]
    if before:
        m = before.get("meta", {})
        out += [
            f"The before column: {before.get('_path', 'the compared results file')}, a {m.get('mode', '?')} run of "
            f"{m.get('machine', {}).get('date', '?')} (load average {m.get('machine', {}).get('load_at_start', '?')} "
            "at its start). A quick run is smaller (fewer messages, shorter runs, one round of peers) and its "
            "equal-load rate is half the slowest peer's maximum *in that run*: compare runs of one mode.",
            "",
        ]
    if misses:
        out += ["Missed, with what the run shows:", "", *misses, ""]
    return "\n".join(out)


def earlier_targets(R: dict[str, Any]) -> list[list[str]]:
    """The first targets, still measured: faster than Celery and arq, flat poll cost."""
    rows: list[list[str]] = []
    tomb, peers = R.get("tomb"), R.get("peers")
    if peers:
        r = peers["ratios"]
        ok = all(r.get(k, 0) > 1 for k in ("Celery", "arq"))
        rows.append(
            [
                "(earlier) faster than Celery and arq, same run",
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
        "",
        node_line(m.get("node")),
    ]
    for r in m.get("reruns", []):
        lines += [
            "",
            f"Re-run after the {m.get('mode', '?')} run: part(s) {', '.join(r['parts'])} on {r['date']} "
            f"({r.get('duration_min', 0):.0f} min, "
            f"load average {r.get('load_at_start', '?')} at its start){': ' + r['why'] if r.get('why') else ''}."
            + (f" {node_line(r['node'])}" if r.get("node") else ""),
        ]
    table = node_parts(m.get("node_parts") or {})
    if table:
        lines += ["", table]
    return "\n".join(lines)


def node_line(n: dict[str, Any] | None) -> str:
    """The node at the run's start (bench/node.py ``describe``): fresh or with history, heap, collector."""
    if not n:
        return "Node: not recorded in these results (the bench records its node from the next run on)."
    if "fresh" not in n:
        history = "keyspaces not read"
    elif n["fresh"]:
        history = "**fresh**: no keyspace but Cassandra's own and the bench's"
    else:
        others = ", ".join(f"{k} ({t} tables)" for k, t in sorted(n.get("other_keyspaces", {}).items()))
        history = f"**with history**: other keyspaces {others}"
    data = f", {n['data_bytes'] / 2**20:,.0f} MiB on disk" if n.get("data_bytes") is not None else ""
    up = n.get("uptime_s")
    uptime = f"up {up / 3600:.1f} h" if isinstance(up, (int, float)) and up >= 3600 else f"up {up} s"
    return (
        f"Node (at the start): one local Cassandra, {history}; {n.get('tables', '?')} tables in "
        f"{n.get('keyspaces', '?')} keyspaces{data}; {uptime}; heap -Xmx{n.get('heap_max', '?')} "
        f"(-Xms{n.get('heap_min', '?')}), {n.get('gc') or 'collector ?'}."
    )


def node_parts(parts: dict[str, dict[str, Any]]) -> str:
    """The node during each part (bench/node.py ``delta``): its own local reads and writes, its GC pauses."""
    if not parts:
        return ""

    def ops(d: dict[str, Any], op: str) -> str:
        if f"{op}s" not in d:
            return "–"
        mean = d.get(f"{op}_mean_ms")
        return f"{d[f'{op}s']:,}" + (f" ({mean:.3f} ms)" if mean is not None else "")

    def gc(d: dict[str, Any]) -> str:
        g = d.get("gc")
        return "–" if g is None else f"{g['count']}: {g['total_ms']:,.0f} ms in all, longest {g['max_ms']:,.0f} ms"

    rows = [[name, _n(d.get("seconds")), ops(d, "read"), ops(d, "write"), gc(d)] for name, d in parts.items()]
    return "\n".join(
        [
            "The node during each part: its own local reads and writes (count, and mean latency over the part: the "
            "change of each keyspace's total latency ÷ the change of its count, from `nodetool tablestats`), and "
            "its GC pauses (from its gc.log). Other work against the node during the part counts too.",
            "",
            _table(["part", "s", "local reads (mean)", "local writes (mean)", "GC pauses"], rows),
        ]
    )
