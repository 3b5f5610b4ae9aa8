"""docs/benchmarks.md: the tables and plots of one run, regenerated between two markers.

The Summary at the top has one row per target of issue 15 (bench/targets.py), beside the "before"
baseline (bench/baseline.py), and gives the reason of every miss (bench/why-issue15.toml).

Everything between ``<!-- bench:begin -->`` and ``<!-- bench:end -->`` is written by this module
from bench/out/results-<mode>.json; text outside the markers (the analysis a person wrote about
the profile and the missed targets) is kept as it is. A quick run writes bench/out/report-quick.md
instead, so it never replaces the full run's numbers in docs/.
"""

from __future__ import annotations

import math
import shutil
import statistics
from pathlib import Path
from typing import Any

from . import baseline, targets
from .env import DOCS, out_dir
from .stats import fmt_ms

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def _n(x: float | None, digits: int = 0) -> str:
    if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))):
        return "–"
    return f"{x:,.{digits}f}"


def _lat(lat: dict[str, Any]) -> str:
    return " | ".join(fmt_ms(lat[k]) for k in ("p50", "p95", "p99", "max"))


def _ms(x: float) -> str:
    """A latency with its unit: '183 ms' or '2.07 s'."""
    text = fmt_ms(x)
    return text if text.endswith(" s") or text == "–" else text + " ms"


def _met(ok: bool | None) -> str:
    return "–" if ok is None else ("**met**" if ok else "**missed**")


def _table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


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


def section_e2e(R: dict[str, Any], img: str) -> str:
    e2e, half = R.get("e2e"), R.get("half")
    if not e2e:
        return ""
    best = e2e["best_run"]
    out = [
        "## 1. End to end: throughput and latency",
        "",
        "One daemon (`casque run`, the real CLI, in its own process) on the local node; the producer (`send_many`, 4 "
        "concurrent "
        "senders of 500) in another process. Throughput = messages ÷ (last ack written − first send call). Latency = "
        "handler start − "
        "send call, per message. Every setting runs on a fresh 16-shard queue.",
        "",
    ]
    rows = [
        [
            r["label"],
            str(r["settings"]["consumers"]),
            str(r["settings"]["batch_size"]),
            _n(r["n"]),
            _n(r["throughput"]),
            _n(r["send_rate"]),
            _lat(r["latency"]),
        ]
        for r in [best] + ([half["run"]] if half else [])
    ]
    out.append(
        _table(
            ["run", "consumers", "batch", "messages", "msg/s", "sent at msg/s", "p50 ms", "p95 ms", "p99 ms", "max ms"],
            rows,
        )
    )
    out += [
        "",
        f"The full-load row is a re-run of the best setting ({best['label']}): {_n(best['throughput'])} msg/s"
        + (f"; half load = {_n(half['run']['offered_rate'])} msg/s offered (half the best median)" if half else "")
        + ". "
        "At full load the producer outruns the daemon, so send→start mostly measures the backlog; the half-load row is "
        "the latency a "
        "message sees when the daemon keeps up.",
        "",
        _rt_line(best, "at full load"),
        _rt_line(half["run"], "at half load") if half else "",
        "",
        f"**Best setting found: `worker.consumers = {e2e['best']['consumers']}`, `worker.batch_size = "
        f"{e2e['best']['batch_size']}`** "
        f"(median {_n(e2e['best']['throughput'])} msg/s; the current defaults "
        f"{e2e['defaults']['consumers']}/{e2e['defaults']['batch_size']}: "
        f"{_n(e2e['defaults']['throughput'])} msg/s).",
        "",
        f"![throughput vs consumers]({img}/bench-throughput.png)",
        "",
        "<details><summary>The whole sweep</summary>",
        "",
    ]
    grid = e2e["grid"]
    rows = [
        [
            str(r["settings"]["consumers"]),
            str(r["settings"]["batch_size"]),
            _n(r["throughput"]),
            _n(r["send_rate"]),
            _lat(r["latency"]),
        ]
        for r in grid
    ]
    out.append(_table(["consumers", "batch", "msg/s", "sent at", "p50 ms", "p95 ms", "p99 ms", "max ms"], rows))
    if e2e.get("confirm"):
        out += ["", "Re-runs (interleaved) of the best settings and the defaults:", ""]
        rows = [[r["label"], _n(r["n"]), _n(r["throughput"]), _lat(r["latency"])] for r in e2e["confirm"]]
        out.append(_table(["run", "messages", "msg/s", "p50 ms", "p95 ms", "p99 ms", "max ms"], rows))
    out += ["", "</details>", ""]
    return "\n".join(out)


def _rt_line(run: dict[str, Any], what: str) -> str:
    lat = (run.get("cql", {}).get("daemon", {}) or {}).get("latency", {})
    parts = [f"{kind} p50 {v['p50']:.1f} / p99 {v['p99']:.1f} ms ({v['count']:,})" for kind, v in lat.items() if v]
    return (f"CQL round trips seen by the daemon {what}: " + "; ".join(parts) + ".  ") if parts else ""


def _num(x: Any, digits: int = 2) -> str:
    return _n(x, digits) if targets.finite(x) else "–"


def section_pickup(R: dict[str, Any]) -> str:
    """Round trips per take and the idle daemon's requests, before and after (issue 15)."""
    takes, idle = R.get("takes"), R.get("idle")
    if not takes and not idle:
        return ""
    base = baseline.load() or {}
    f, bf = targets.figures(R), base.get("figures", {})
    engine = base.get("engine", "?")

    def row(label: str, show: Any) -> list[str]:
        return [label, show(bf) if bf else "–", show(f)]

    def trips(level: str) -> Any:
        def show(g: dict[str, Any]) -> str:
            if f"{level}_waves_mean" not in g:
                return "–"
            return (
                f"{_num(g[f'{level}_waves_mean'])} (median {_num(g[f'{level}_waves_p50'], 0)}, max "
                f"{_num(g[f'{level}_waves_max'], 0)}); "
                f"{_num(g[f'{level}_requests_mean'])} requests; {_n(g[f'{level}_takes'])} traced"
            )

        return show

    rows = [
        row(
            "round trips per fetch that took messages, from its first request (bench trace of `Consumer.fetch`): mean "
            "(median, max)",
            trips("fetch"),
        ),
        row(
            "… the same, from the engine's `casque_take_round_trips` histogram: mean",
            lambda g: _num(g.get("engine_round_trips")),
        ),
        row(
            "round trips of the visit of the row that yielded, from its peek (`Consumer._visit_row`): mean (median, "
            "max)",
            trips("visit"),
        ),
        row("one visit, first request → batch written: p50 ms", lambda g: _num(g.get("visit_take_ms_p50"), 1)),
        row(
            "send → handler start at the same low rate: p50 / p99",
            lambda g: f"{_ms(g['low_load_p50'])} / {_ms(g['low_load_p99'])}" if "low_load_p50" in g else "–",
        ),
        row("idle daemon, one 16-shard queue: CQL requests/s on the wire", lambda g: _num(g.get("idle_rps"), 1)),
        row("… of which through the engine (Database.run)", lambda g: _num(g.get("idle_engine_rps"), 1)),
    ]
    out = [
        "## 1c. Pickup cost: round trips per take, and the idle daemon (issue 15)",
        "",
        "**Round trips per take** (part `takes`, bench/takes.py): one daemon with the default `[worker]` settings on a "
        "fresh 16-shard "
        f"queue, messages offered one at a time at {_n(takes['rate'] if takes else 20)} msg/s, so nearly every take "
        "finds one message that "
        "has just become due. Inside the daemon (bench/taketrace.py) two things are followed through `Database.run`: "
        "every *fetch* "
        "that took messages, from its first request (the definition of the engine's `casque_take_round_trips` "
        "histogram, so empty "
        "shards passed on the way count), and every *visit* of the row that yielded, from the peek that found the work "
        "to the batch "
        "that took it. Requests issued while another of the same take is in flight share a round trip: the *sequential "
        "round trips* "
        "are what a message waits for, the *requests* what the node serves. The Summary takes the engine's histogram "
        "when it has one, "
        "else the fetch trace.",
        "",
        "**Idle cost** (part `idle`, bench/idle.py): one daemon with the default settings serves one fresh 16-shard "
        "queue and nothing is "
        f"sent; after a {_n(idle['warmup_s'] if idle else 15)} s warm-up, every request frame its driver sends "
        "(`Connection.send_msg`: "
        "statements, heartbeats, control connection) is counted for "
        f"{_n(idle['seconds'] if idle else 30)} s, and the engine's statements by name beside it.",
        "",
        _table(["figure", f"before (casque {engine})" if bf else "before", "this run"], rows),
        "",
    ]
    seqs = [
        ("before", level, q)
        for level, v in (base.get("takes") or {}).get("levels", {}).items()
        for q in v.get("sequences", [])[:3]
    ]
    seqs += [
        ("this run", level, q)
        for level, v in (takes or {}).get("levels", {}).items()
        for q in v.get("sequences", [])[:3]
    ]
    if seqs:
        out += [
            "The usual takes (`→` separates round trips, `‖` requests in the same round trip, `×n` n requests of one "
            "statement):",
            "",
            _table(
                ["run", "traced", "takes", "round trips", "requests in order"],
                [[w, lv, _n(q["count"]), str(q["waves"]), q["steps"]] for w, lv, q in seqs],
            ),
            "",
        ]
    if idle:
        before = (base.get("idle") or {}).get("engine_by_statement_per_s", {})
        names = list(idle["engine_by_statement_per_s"]) + [
            k for k in before if k not in idle["engine_by_statement_per_s"]
        ]
        out += [
            "What the idle daemon sends, per second:",
            "",
            _table(
                ["statement (engine) or frame type (wire)", "before", "this run"],
                [[f"`{k}`", _num(before.get(k)), _num(idle["engine_by_statement_per_s"].get(k))] for k in names[:12]]
                + [
                    [f"wire: {k}", _num((base.get("idle") or {}).get("wire_by_type_per_s", {}).get(k)), _num(v)]
                    for k, v in idle["wire_by_type_per_s"].items()
                ],
            ),
            "",
        ]
        callers, before_callers = (
            idle.get("engine_by_caller_per_s", {}),
            (base.get("idle") or {}).get("engine_by_caller_per_s", {}),
        )
        if callers or before_callers:
            keys = list(callers) + [k for k in before_callers if k not in callers]
            out += [
                "… and which engine function sent it:",
                "",
                _table(
                    ["engine function", "before", "this run"],
                    [[f"`{k}`", _num(before_callers.get(k)), _num(callers.get(k))] for k in keys[:12]],
                ),
                "",
            ]
    return "\n".join(out)


def section_sched(R: dict[str, Any]) -> str:
    s = R.get("sched")
    if not s:
        return ""
    rows = []
    for kind, what in (
        ("delay", "delayed messages (delays spread over the run)"),
        ("cron", "cron `* * * * * *` (every second)"),
    ):
        lat = s[kind]["latency"]
        rows.append(
            [
                what,
                f"{lat['count']} / {s['expected'][kind]}",
                _lat(lat),
                fmt_ms(s[kind]["min"]) if s[kind]["min"] is not None else "–",
            ]
        )
    return "\n".join(
        [
            "## 2. Scheduling precision",
            "",
            "Lateness = handler start − due time (the cron's scheduled fire time), measured in the daemon, which is "
            "otherwise idle.",
            "",
            _table(["what", "fired / expected", "p50 ms", "p95 ms", "p99 ms", "max ms", "min ms"], rows),
            "",
        ]
    )


def section_tomb(R: dict[str, Any], img: str) -> str:
    t = R.get("tomb")
    if not t:
        return ""
    q = t["queue"]
    rows = [
        [
            _n(p["messages"]),
            f"{p.get('elapsed_s', 0):.0f}",
            _n(p["interval_rate"]),
            _n(p["tombstones_peek_median"]),
            _n(p["tombstones_max"]),
            _n(p.get("sstables_median")),
            f"{p['peek_ms']:.2f}",
            f"{p['lock_ms']:.2f}",
            f"{p['control_ms']:.2f}",
            p["from_start"],
        ]
        for p in t["casque"]
    ]
    nrows = [
        [
            _n(p["messages"]),
            _n(p.get("interval_rate")),
            "aborted" if p.get("failed") else _n(p.get("tombstones")),
            "–" if p.get("failed") else f"{p['peek_ms']:.2f}",
        ]
        for p in t["naive"]
    ]
    return "\n".join(
        [
            "## 3. Tombstone flatness vs the anti-pattern",
            "",
            f"{_n(t['messages'])} messages through one queue ({q['shards']} shards, **one time bucket for the whole "
            "run**: every message of a "
            "shard is written to and deleted from the same partition, the worst case for casque; only the cursors keep "
            "polls off that history), "
            f"offered at a constant {_n(t['rate'])} msg/s so that every checkpoint sees the same load. Each time "
            "another checkpoint's worth is acked, "
            "the daemon's poll reads are replayed on every shard row from the cursor it persisted, with query tracing "
            "(tombstone cells the "
            "node scanned) and untraced latency (median of 15). A poll under load scans what was consumed within the "
            "last clock tolerance "
            "(rate × 5 s ÷ shards): bounded by the rate, never by the history.",
            "",
            _table(
                [
                    "acked",
                    "s",
                    "msg/s",
                    "tombstones per poll (median shard)",
                    "(worst shard, incl. lock read)",
                    "SSTables merged per peek",
                    "peek ms",
                    "lock read ms",
                    "control ms",
                    "same rows read from the row start",
                ],
                rows,
            ),
            "",
            "The naive queue (bench/naive.py: one partition, `SELECT … LIMIT 100`, delete on ack), in rounds: "
            f"{t['naive_end']}.",
            "",
            _table(["messages", "msg/s in round", "tombstones per head read", "head read ms"], nrows),
            "",
            f"casque after {_n(t['messages'])} messages: tombstones per poll ×{_n(tomb_ratios(t)[0], 2)} of the first "
            "checkpoint; peek latency "
            f"×{_n(tomb_ratios(t)[1], 2)} (median of the last three checkpoints ÷ the first three). The control column "
            "(an empty queue read at "
            "the same moment) shows how much of a probe's latency is the machine's noise of that minute; the SSTables "
            "column shows the other "
            "source of drift: how many SSTables the peek had to merge (read amplification, which compaction moves up "
            "and down), while the "
            "tombstones it scans stay flat.",
            "",
            f"![tombstone flatness]({img}/bench-tombstones.png)",
            "",
        ]
    )


def section_peers(R: dict[str, Any], img: str) -> str:
    p = R.get("peers")
    if not p:
        return ""
    rows = []
    for r in p["runs"]:
        rows.append(
            [
                r["label"].replace("peers_", ""),
                _n(r["throughput"]),
                _n(r["send_rate"]),
                _lat(r["latency"]),
                _n(1000 * (r["cpu"].get("daemon_s", r["cpu"].get("worker_s", 0))) / r["n"], 3),
            ]
        )
    means = p.get("mean_throughput", {})
    mrows = [
        [name, _n(tp), "" if name == "casque" else f"**{p['casque_throughput'] / tp:.2f}×**"]
        for name, tp in means.items()
    ]
    eq = []
    for r in p["equal"]:
        eq.append([r["system"], _n(r.get("offered_rate")), _n(r["throughput"]), _lat(r["latency"])])
    first_run = {r["system"]: r for r in reversed(p["runs"])}  # one line per system
    cfg = [
        f"- **{name}**: " + "; ".join(f"{k}: {v}" for k, v in r["settings"].items())
        for name, r in first_run.items()
        if name != "casque"
    ]
    casque_cfg = next(r for r in p["runs"] if r["system"] == "casque")["settings"]
    cfg.insert(
        0,
        "- **casque**: "
        + ", ".join(f"{k} {v}" for k, v in casque_cfg.items())
        + "; Cassandra commitlog_sync periodic (10 s)",
    )
    return "\n".join(
        [
            "## 4. Peers: same machine, same run, same workload",
            "",
            f"{_n(p['n'])} no-op tasks each, sent as fast as each system's producer API allows, one worker process, at "
            f"most {p['concurrency']} "
            'tasks running at once. "Acked" is read from each broker (casque: the ack batch written). The runs are '
            "interleaved "
            f"({p.get('rounds', 1)} round(s) of "
            f"{', '.join(p.get('systems', ['casque', 'Celery', 'arq', 'pgqueuer']))}, then casque once more); "
            "each system's throughput is the mean of its runs.",
            "",
            _table(["system", "mean msg/s", "casque ÷ system"], mrows),
            "",
            _table(
                ["run", "msg/s", "sent at msg/s", "p50 ms", "p95 ms", "p99 ms", "max ms", "worker CPU ms/msg"], rows
            ),
            "",
            "Latency at full load is mostly time spent queued behind the backlog (the producers outrun every "
            "consumer), so it is shown "
            "for completeness; the equal-load runs below compare latency.",
            "",
            f"Latency at equal load: every system offered {_n(p['equal_rate'])} msg/s (half the slowest peer's "
            "maximum) for the same time:",
            "",
            _table(["system", "offered msg/s", "msg/s", "p50 ms", "p95 ms", "p99 ms", "max ms"], eq),
            "",
            f"![latency CDF]({img}/bench-latency-cdf.png)",
            "",
            "Configurations (each as its documentation recommends for throughput; durability no stronger than the "
            "Cassandra node's):",
            "",
            *cfg,
            "",
        ]
    )


def section_stress(R: dict[str, Any]) -> str:
    s, c = R.get("stress"), R.get("ceiling")
    if not s:
        return ""
    rows = [
        [
            w,
            _n(s[w]["ops_per_s"]),
            _n(s[w]["ops"]),
            str(s[w].get("latency_mean_ms")),
            str(s[w].get("latency_p99_ms")),
            _n(s[w].get("node_cpu_ms_per_op"), 3),
            f"`{s[w]['command']}`",
        ]
        for w in ("write", "mixed")
    ]
    out = [
        "## 5. Physical limit: cassandra-stress on the same node",
        "",
        f"cassandra-stress {s['version']} (Apache publishes no 5.0 tool tarball on Maven Central; the 4.0-alpha2 tool "
        "speaks "
        "native protocol v4 to the 5.0 node), same node, same run, keyspace casque_bench.",
        "",
        _table(["workload", "op/s", "ops", "mean ms", "p99 ms", "node CPU ms/op", "command"], rows),
        "",
    ]
    if c:
        pm = c["per_message"]
        out += [
            f"CQL per message, counted in the end-to-end run shown in part 1 (producer + daemon, ÷ messages acked): "
            f"{pm['requests']:.3f} requests ({pm['read_requests']:.3f} reads, {pm['write_requests']:.3f} writes of "
            "which "
            f"{pm['batch_requests']:.3f} batches), {pm['reads'] + pm['writes']:.2f} statements ({pm['reads']:.3f} "
            f"reads, {pm['writes']:.2f} row writes), "
            f"{pm['lwt']:.4f} LWT.",
            "",
            "casque's best below is the best setting's median throughput in part 1; CPU per message is the median "
            "over the "
            f"{c.get('cpu_runs', 1)} end-to-end runs (the node is shared with other engineers' tests, so one run's "
            "node CPU can carry "
            "their load).",
            "",
            _table(
                ["ceiling", "msg/s", "casque's best", "casque % of ceiling"],
                [
                    [
                        "node CPU (stress's CPU per write × write op/s ÷ casque's node CPU per message)",
                        _n(c.get("cpu_ceiling")),
                        _n(c["throughput"]),
                        f"{c.get('pct_of_cpu_ceiling', float('nan')):.0f}%",
                    ],
                    [
                        "per request (batches cost one write: optimistic)",
                        _n(c["request_ceiling"]),
                        _n(c["throughput"]),
                        f"{c['pct_of_request_ceiling']:.0f}%",
                    ],
                    [
                        "per statement (batching saves nothing: pessimistic)",
                        _n(c["statement_ceiling"]),
                        _n(c["throughput"]),
                        f"{c['pct_of_statement_ceiling']:.0f}%",
                    ],
                ],
            ),
            "",
            f"Derived costs: a write {c['write_cost_us']:.0f} µs, a read {c['read_cost_us']:.0f} µs of node time (1/W, "
            "2/M − 1/W). "
            f"The node spent {c['node_cpu_ms_per_message']:.3f} ms CPU per casque message (median), "
            f"{c.get('node_cpu_ms_per_write_op', 0):.3f} ms per stress write.",
            "",
        ]
        b = c.get("cpu_budget_ms")
        if b:
            out += [
                f"CPU budget of one message (medians): daemon {b['daemon_s']:.3f} ms + Cassandra node "
                f"{b['node_s']:.3f} ms + producer "
                f"{b['producer_s']:.3f} ms = {sum(b.values()):.3f} ms, so {c['cores']} cores could carry at most "
                f"{_n(c['cpu_bound'])} msg/s "
                "if casque had the machine to itself (it does not: other engineers' nodes and tests run beside it).",
                "",
            ]
    return "\n".join(out)


def section_profile(R: dict[str, Any], img: str) -> str:
    p = R.get("profile")
    if not p or "components" not in p:
        return ""
    comps = [[n.replace("(counting)", "(no-op handler, ack counter)"), f"{v:.1f}%"] for n, v in p["components"][:10]]
    selfs = [[f"`{n}`", f"{v:.1f}%"] for n, v in p["self"][:10]]
    incl = [[f"`{n}`", f"{v:.1f}%"] for n, v in p["casque_inclusive"][:10]]
    run = p["run"]
    return "\n".join(
        [
            "## 6. Profile of the daemon at full load",
            "",
            f"`py-spy record --rate 100 --gil --format raw` on the daemon process while it took {_n(run['n'])} "
            "messages "
            f"({_n(run['throughput'])} msg/s, {p['samples']:,} samples, {p['cpu_ms_per_message']:.3f} ms of daemon CPU "
            "per message). "
            f"**The daemon's Python held the GIL {100 * p.get('gil_busy', 0):.0f}% of the run's wall time**: the rest "
            "it waited for Cassandra. "
            "Raw stacks: bench/out/profile/daemon.txt. The driver's compiled (Cython) code has no Python frames, so "
            "its time shows "
            "under the casque line that calls it: `MessageTable.insert_message`/`delete_message` is the driver binding "
            "and serialising "
            "a statement, `Database.run` is its `execute_async` (encoding the request, batches included).",
            "",
            f"![profile]({img}/bench-profile.png)",
            "",
            _table(["component (self time)", "share"], comps),
            "",
            _table(["hottest functions (self)", "share"], selfs),
            "",
            _table(["casque functions (inclusive)", "share"], incl),
            "",
        ]
    )


def repro() -> str:
    return "\n".join(
        [
            "## Reproduce",
            "",
            "```console",
            "make bench                          # full mode (45-60 min on this shared 2-core machine): every part, "
            "writes docs/benchmarks.md and docs/bench-*.png",
            "make bench BENCH_ARGS=--quick       # about 15 min; writes bench/out/report-quick.md",
            "python -m bench --only e2e,tomb     # some parts (e2e, takes, idle, sched, tomb, peers, stress, profile); "
            "others keep their last results",
            "python -m bench --quick --only takes,idle   # issue 15's pickup figures alone (about 2 min)",
            'python -m bench baseline --quick    # the saved quick results become issue 15\'s "before" column '
            "(bench/baseline-issue15.json)",
            "python -m bench setup               # only install: bench/requirements.lock, redis-server, postgresql, "
            "cassandra-stress",
            "python -m bench --report-only       # re-render the report from bench/out/results-full.json (after "
            "editing bench/why-issue15.toml)",
            "python -m bench --only sched --daemon-option max_poll_interval=0.1   # a what-if: its own results file, "
            "never docs/",
            "python -m bench --only peers --no-docs   # full size, one part, report in bench/out/report-full.md: docs/ "
            "keeps the full run",
            'python -m bench many-queues --quick --write-docs   # issue 17\'s scenario (section "Many queues" below); '
            "full size: without --quick",
            "python -m bench --only sqs-fifo     # issue 25: FIFO queues, casque serve beside ElasticMQ (own section "
            "below); --systems elasticmq",
            "```",
            "",
            "The parts, in the order they run:",
            "",
            "- `e2e` (1): the sweep of consumers × batch size, N no-op messages sent as fast as possible, then the "
            "best setting at half its "
            "throughput (1b).",
            "- `takes` (1c): messages offered one at a time at 20 msg/s to a default daemon; inside it "
            "bench/taketrace.py follows every take "
            "through `Database.run` and counts its requests and its sequential round trips (requests of one take in "
            "flight together count "
            "once), and names each statement; an engine that observes `casque_take_round_trips` is read too, and "
            "preferred.",
            "- `idle` (1c): a default daemon on one fresh 16-shard queue, nothing sent; after a warm-up, every request "
            "frame the daemon's "
            "driver sends (`Connection.send_msg`: statements, heartbeats, control connection) is counted over a fixed "
            "window (30 s quick, "
            "60 s full), with the engine's statements by name.",
            "- `sched` (2): delayed messages and a per-second cron on an otherwise idle daemon; lateness = handler "
            "start − due time.",
            "- `tomb` (3): tombstones and latency of casque's polls as a million messages (full mode) go through one "
            "time bucket, against "
            "a naive delete-on-ack queue.",
            "- `peers` (4): casque, Celery, arq, Dramatiq, pgqueuer and procrastinate, interleaved, throughput at full "
            "load, then every "
            "system at an equal rate (half the slowest one's maximum) for latency; the CDF plot draws every system.",
            "- `stress` (5): cassandra-stress on the same node, the physical ceiling.",
            "- `profile` (6): py-spy on the daemon at full load.",
            "- `sqs-fifo`: FIFO queues over the SQS API, `casque serve` beside ElasticMQ (bench/sqs_fifo.py; section "
            '"FIFO queues beside '
            'ElasticMQ" below, between markers of its own).',
            "",
            'The Summary compares every issue-15 target with bench/baseline-issue15.json (the "before" column, written '
            "by "
            "`python -m bench baseline`) and states the reason of each miss from bench/why-issue15.toml (written by "
            "hand after the run; a "
            "placeholder sentence until then).",
            "",
            "The bench installs what it needs itself: its hash-locked Python packages (bench/requirements.lock) into "
            "the running venv, "
            "Debian's redis-server and postgresql (as root, `apt-get update` first), cassandra-stress from Maven "
            "Central, and it starts the "
            "local Cassandra node (`daemon.devnode`) and its own Redis and PostgreSQL instances on ports 6391 and "
            "5439, which it stops at "
            "the end. Everything it writes in Cassandra is in the `casque_bench` keyspace and expires by TTL.",
            "",
        ]
    )


def render(R: dict[str, Any], img: str) -> str:
    parts = [
        "# casque benchmarks",
        "",
        BEGIN,
        "",
        header(R),
        "",
        "## Summary: the targets",
        "",
        summary(R),
        "",
        section_e2e(R, img),
        section_pickup(R),
        section_sched(R),
        section_tomb(R, img),
        section_peers(R, img),
        section_stress(R),
        section_profile(R, img),
        repro(),
        END,
    ]
    return "\n".join(p for p in parts if p is not None)


def write(R: dict[str, Any], plots_dir: Path, to_docs: bool, name: str = "report-quick.md") -> Path:
    if to_docs:
        target = DOCS / "benchmarks.md"
        for png in plots_dir.glob("bench-*.png"):
            shutil.copy(png, DOCS / png.name)
    else:
        target = out_dir() / name
    text = render(R, ".")  # the PNGs sit beside the report in both cases
    if target.exists():
        old = target.read_text()
        if BEGIN in old and END in old:
            head, rest = old.split(BEGIN, 1)
            _, tail = rest.split(END, 1)
            body = text.split(BEGIN, 1)[1].split(END, 1)[0]
            text = head + BEGIN + body + END + tail  # what a person wrote outside the markers stays
    target.write_text(text if text.endswith("\n") else text + "\n")
    return target


# --------------------------------------------------------------------------- many-queues (bench/many_queues.py)

MQ_BEGIN, MQ_END = "<!-- many-queues:begin -->", "<!-- many-queues:end -->"


def section_many_queues(R: dict[str, Any], img: str) -> str:
    z, c, f, lat, led, rss = R["size"], R["create"], R["fill"], R["latency"], R["ledger"], R["rss"]
    t, kill, reads = R.get("table") or {}, R.get("kill") or {}, R["reads"]
    mach = R.get("machine", {})
    by = reads["by_kind"]
    live = R.get("live") or {}
    rt = reads.get("cql_latency_ms") or {}

    def cql(kind: str, what: str) -> list[str]:
        k = by.get(kind) or {}
        return [what, _n(k.get("requests")), _n(k.get("reads_per_request"), 2), _n(k.get("cql_per_request"), 2)]

    at = rss.get("rss_mb_at", {})
    serving_s = (R.get("live") or {}).get("seconds", 0) + (R.get("drain") or {}).get("seconds", 0)
    rows = [
        [
            f"create {_n(c['queues'])} tiny queues ({', '.join(f'{k} {v}' for k, v in c['settings'].items())})",
            f"{_n(c['rate'])} queues/s with `{c['api']}`, {c['concurrency']} concurrent; per {c['per']}: p50 "
            f"{_ms(c['p50_ms'])}, p99 {_ms(c['p99_ms'])}",
        ],
        [
            "`queues` table on disk (nodetool flush + tablestats)",
            f"{_n(t['after'].get('bytes'))} bytes (compressed, live SSTables) for an estimated "
            f"{_n(t['after'].get('partitions'))} partitions "
            f"(this run's queues and the deleted rows of earlier runs): {_n(t.get('bytes_per_partition'), 1)} bytes "
            "per queue row, "
            f"so about {_n((t.get('bytes_per_partition') or 0) * 1e6 / 2**20)} MiB per million queues"
            if t
            else "not measured",
        ],
        [
            f"fill {_n(f['messages'])} messages, Zipf s={f['zipf_s']}",
            f"{_n(f['rate'])} msg/s (`send_many` per queue) into {_n(f['queues_with_messages'])} queues; the largest "
            f"holds {_n(f['largest_queue'])}",
        ],
        [
            f"{_n(z['users'])} users long-polling (WaitTimeSeconds {z['wait_s']}), producers at {_n(z['send_rate'])} "
            f"msg/s for {_n(z['live_s'])} s",
            f"send→receive for online owners: p50 {_ms(lat['p50_ms'])}, p99 {_ms(lat['p99_ms'])} ({_n(lat['count'])} "
            "messages); "
            f"away from the kill: p50 {_ms(lat['calm_p50_ms'])}, p99 {_ms(lat['calm_p99_ms'])} "
            f"({_n(lat['calm_count'])}). "
            f"SendMessage round trip p50 {_ms(live.get('send_p50_ms'))}, p99 {_ms(live.get('send_p99_ms'))}. The "
            "owners first emptied the "
            f"{_n(live.get('backlog'))} messages the fill left them ({_n(live.get('catch_up_s'), 1)} s)",
        ],
        [
            "kill -9 of casque serve halfway, restarted on the same port",
            f"back in {_n(kill.get('down_s'), 1)} s; clients retried {_n(kill.get('client_retries'))} calls"
            if kill.get("done")
            else "no kill in this run",
        ],
        [
            "server RSS vs queues it has served (last process); its [cache] limits: "
            + (", ".join(f"{k} {v:,}" for k, v in R.get("server_cache", {}).items()) or "the defaults"),
            f"{_n(at.get('25%'), 1)} / {_n(at.get('50%'), 1)} / {_n(at.get('75%'), 1)} / {_n(at.get('100%'), 1)} MB at "
            "25/50/75/100 % of "
            f"{_n(rss.get('queues_touched'))} queues: {_n(rss.get('growth_second_half_mb'), 1)} MB growth over the "
            f"second half; peak {_n(rss.get('peak_mb'), 1)} MB",
        ],
        [
            "ledger",
            f"sent {_n(led['sent'])}, deleted {_n(led['deleted'])}, **lost {led['lost']}**, duplicate deliveries "
            f"{led['duplicate_deliveries']}, "
            f"deleted twice {led['deleted_twice']}",
        ],
    ]
    out = [
        "## Many queues (issue 17)",
        "",
        f"Run: **{z['name']} size**, {R['started']}, `python -m bench "
        f"many-queues{' --quick' if z['name'] == 'quick' else ''}`. Machine: "
        f"{mach.get('cpu', '?')}, load average {mach.get('load_at_start', '?')} at the start (shared with other "
        "engineers' runs). "
        f"Engine at {R.get('engine', '?')}.",
        "",
        "One `casque serve` process (the SQS face, as a deployment runs it) serves every user; users and producers are "
        "asyncio tasks of "
        "the bench process speaking the SQS JSON protocol to it (one HTTP connection per long-polling user). A process "
        "per user would "
        "measure the 2-core machine's scheduler, not casque. The server's CQL is counted in the server and charged to "
        "the SQS request "
        "that caused it (bench/many_queues_serve.py).",
        "",
        _table(["step", "measured"], rows),
        "",
        "Cassandra requests per SQS request (in the server, both processes summed; the killed one up to its last "
        "half-second report):",
        "",
        _table(
            ["SQS request", "count", "CQL reads per request", "all CQL per request"],
            [
                cql("receive", "ReceiveMessage that returned messages"),
                cql("empty_long_poll", "empty long poll (WaitTimeSeconds > 0)"),
                cql("empty_receive", "receive on an idle queue (WaitTimeSeconds 0)"),
                cql("send", "SendMessage"),
                cql("delete", "DeleteMessageBatch"),
            ],
        ),
        "",
        f"CQL reads outside any request (background): {_n(reads['reads_outside_requests'])} in {_n(serving_s)} s of "
        "serving. "
        "CQL round trips seen by the server (last process): "
        + "; ".join(f"{k} p50 {v['p50']:.1f} / p99 {v['p99']:.1f} ms" for k, v in rt.items())
        + f". The server used {_n((rss.get('cpu_pct') or {}).get('live'))} % of a core while users and producers ran, "
        f"{_n((rss.get('cpu_pct') or {}).get('drain'))} % during the drain.",
        "",
        f"![server RSS vs queues touched]({img}/bench-many-queues-rss.png)",
        "",
        _mq_light(R.get("light")),
        _mq_baseline(R.get("baseline")),
        "Full size (1,000,000 queues, 1,000,000 messages, 20,000 users; needs `ulimit -n` ≥ 40,000 and about "
        f"{_n(R.get('full_expected_min'))} min here): `python -m bench many-queues --write-docs`.",
        "",
    ]
    return "\n".join(out)


def write_many_queues(R: dict[str, Any], plots_dir: Path, to_docs: bool) -> Path:
    """The many-queues section between its own markers in docs/benchmarks.md (added at the end the
    first time), or bench/out/report-many-queues-<size>.md."""
    return _write_section(
        section_many_queues(R, "."),
        f"report-many-queues-{R['size']['name']}.md",
        plots_dir / "bench-many-queues-rss.png",
        MQ_BEGIN,
        MQ_END,
        to_docs,
    )


def _write_section(
    body: str, out_name: str, plot: Path, begin: str, end: str, to_docs: bool, before: str | None = None
) -> Path:
    """A section that its own run rewrites between its markers in docs/benchmarks.md, leaving the
    rest of the file alone (placed before the ``before`` marker, or at the end, the first time); or
    bench/out/``out_name`` when the run is not for docs/."""
    if not to_docs:
        target = out_dir() / out_name
        target.write_text(body + "\n")
        return target
    shutil.copy(plot, DOCS / plot.name)
    target = DOCS / "benchmarks.md"
    old = target.read_text() if target.exists() else ""
    block = f"{begin}\n{body}\n{end}"
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    elif before is not None and before in old:
        head, rest = old.split(before, 1)
        text = head + block + "\n\n" + before + rest
    else:
        text = old.rstrip("\n") + "\n\n" + block + "\n"
    target.write_text(text)
    return target


def _mq_baseline(B: dict[str, Any] | None) -> str:
    """One paragraph on the run kept as bench/out/many-queues-<size>-before.json (the grey line)."""
    if not B:
        return ""
    at, by = B["rss"].get("rss_mb_at", {}), B["reads"]
    return (
        f"The grey line: the same bench on the engine before issue 17's changes ({B['engine']}, {B['started']}; "
        f"{_n(B['queues'])} queues "
        "of 1 shard × 4 buckets, unbounded settings cache, 0.5 s scout polls): RSS "
        f"{_n(at.get('25%'), 1)} / {_n(at.get('50%'), 1)} / {_n(at.get('75%'), 1)} / {_n(at.get('100%'), 1)} MB at "
        "25/50/75/100 %, still "
        f"growing ({_n(B['rss'].get('growth_second_half_mb'), 1)} MB over the second half); reads per empty long poll "
        f"{_n(by['empty_long_poll']['reads_per_request'], 2)}, per idle receive "
        f"{_n(by['empty_receive']['reads_per_request'], 2)}, per receive "
        f"with messages {_n(by['receive']['reads_per_request'], 2)}. Its ledger counted {B['ledger']['lost']} lost, "
        "but that version of the "
        "bench neither retried a delete whose answer the kill swallowed nor re-checked the queues once its drain "
        "deadline had passed "
        "(both fixed since), so that count is not evidence either way.\n"
    )


def _mq_light(L: dict[str, Any] | None) -> str:
    """The unloaded latency (``--size light``): what the same path costs when nothing queues for the CPU."""
    if not L:
        return ""
    lat, z, live = L["latency"], L["size"], L["live"]
    return (
        f"The same path at light load (`python -m bench many-queues --size light`, {L['started']}, load average "
        f"{L.get('load', '?')}: "
        f"{z['users']} users, {_n(z['send_rate'])} msg/s, no kill): send→receive p50 {_ms(lat['p50_ms'])}, p99 "
        f"{_ms(lat['p99_ms'])} "
        f"({_n(lat['count'])} messages); SendMessage round trip p50 {_ms(live.get('send_p50_ms'))}.\n"
    )


# ------------------------------------------------------------------- FIFO queues beside ElasticMQ (bench/sqs_fifo.py)

FIFO_BEGIN, FIFO_END = "<!-- sqs-fifo:begin -->", "<!-- sqs-fifo:end -->"


def _fifo_rate(R: dict[str, Any], v: dict[str, Any] | None, key: str, system: str) -> str:
    if system not in R["systems"] or v is None:
        return "not run"
    if v[key] is None:
        return "**failed**"
    failed = len(v["errors"])
    return _n(v[key]) + (f" ({failed} of {v['rounds']} rounds failed)" if failed else "")


def _fifo_ledger(v: dict[str, Any] | None, phase: str) -> str:
    """The ledger of one system in one scenario, summed over its rounds; faults in bold."""
    if v is None:
        return "–"
    led = v["ledger"]
    if phase == "send":
        text = f"{_n(led['sent'])} sent, {led['send_failed']} failed"
        return f"**{text}**" if led["send_failed"] else text
    faults = [f"lost {led['lost']}", f"dup {led['duplicates']}", f"out of order {led['out_of_order']}"]
    faults += [
        f"{name} {led[k]}"
        for k, name in (
            ("wrong_group", "wrong group"),
            ("unknown", "unknown"),
            ("delete_failed", "delete failed"),
            ("retries", "calls retried"),
        )
        if led.get(k)
    ]
    text = ", ".join(faults)
    bad = (
        led["lost"]
        or led["duplicates"]
        or led["out_of_order"]
        or led["wrong_group"]
        or led["unknown"]
        or led["delete_failed"]
    )
    extra = f" ({_n(led['without_sequence'])} without SequenceNumber)" if led["without_sequence"] else ""
    return (f"**{text}**" if bad else text) + extra


def sqs_fifo_table(R: dict[str, Any]) -> str:
    """Rows: scenario and phase; columns: msgs/s of each server, their ratio, and each one's ledger."""
    labels = R["labels"]
    rows: list[list[str]] = []
    for sc in R["scenarios"]:
        per = R["summary"].get(sc["key"], {})
        c, e = per.get("casque"), per.get("elasticmq")
        for phase, key in (("send", "send_per_s"), ("receive+delete", "receive_delete_per_s")):
            ratio = c[key] / e[key] if c and e and c[key] and e[key] else None
            rows.append(
                [
                    f"{phase}, {sc['label']}",
                    _fifo_rate(R, c, key, "casque"),
                    _fifo_rate(R, e, key, "elasticmq"),
                    f"{_n(ratio, 2)}×" if ratio is not None else "–",
                    _fifo_ledger(c, phase),
                    _fifo_ledger(e, phase),
                ]
            )
    return _table(
        [
            "scenario",
            f"{labels['casque']} msgs/s",
            f"{labels['elasticmq']} msgs/s",
            "casque ÷ ElasticMQ",
            "ledger, casque",
            "ledger, ElasticMQ",
        ],
        rows,
    )


def sqs_fifo_cpu(R: dict[str, Any]) -> str:
    """CPU ms per message of each server (and of Cassandra under casque), per scenario and phase.

    It shows where a ratio comes from.
    """
    rows: list[list[str]] = []
    for sc in R["scenarios"]:
        per = R["summary"].get(sc["key"], {})
        for phase, name in (("send", "send"), ("receive_delete", "receive+delete")):
            cpu = {s: (per.get(s) or {}).get("cpu_ms_per_msg", {}).get(phase) for s in ("casque", "elasticmq")}
            if not any(cpu.values()):
                continue
            c, e = cpu["casque"] or {}, cpu["elasticmq"] or {}
            rows.append(
                [
                    f"{name}, {sc['label']}",
                    _n(c.get("server"), 2),
                    _n(c.get("cassandra"), 2),
                    _n(c.get("client"), 2),
                    _n(e.get("server"), 2),
                    _n(e.get("client"), 2),
                ]
            )
    if not rows:
        return ""
    return "\n".join(
        [
            "<details><summary>CPU per message (ms): each server process, the Cassandra node under casque, and the "
            "bench's own clients</summary>",
            "",
            _table(
                [
                    "scenario",
                    "casque serve",
                    "Cassandra (casque runs)",
                    "clients (casque runs)",
                    "ElasticMQ JVM",
                    "clients (ElasticMQ runs)",
                ],
                rows,
            ),
            "",
            "From /proc (utime + stime) around each phase. The Cassandra node is shared: other engineers' tests add to "
            "it.",
            "",
            "</details>",
        ]
    )


def sqs_fifo_calls(R: dict[str, Any]) -> str:
    """Each action's round trip as the clients saw it (median over the rounds of each run's p50 and p99)."""
    names = (
        ("send_message_batch", "SendMessageBatch"),
        ("receive_message", "ReceiveMessage with messages (its wait included)"),
        ("delete_message_batch", "DeleteMessageBatch"),
    )
    rows: list[list[str]] = []
    for sc in R["scenarios"]:
        per = R["summary"].get(sc["key"], {})
        for key, name in names:
            cells = []
            for s in ("casque", "elasticmq"):
                lat = ((per.get(s) or {}).get("call_ms") or {}).get(key)
                cells.append(f"{_n(lat['p50'], 1)} / {_n(lat['p99'], 1)}" if lat else "–")
            if any(c != "–" for c in cells):
                rows.append([f"{sc['label']}: {name}", *cells])
        pauses = [(per.get(s) or {}).get("longest_pause_s") for s in ("casque", "elasticmq")]
        if any(p is not None for p in pauses):
            rows.append(
                [
                    f"{sc['label']}: longest time without a delivery while draining (worst round), ms",
                    *(_n(1000 * p, 0) if p is not None else "–" for p in pauses),
                ]
            )
    if not rows:
        return ""
    return "\n".join(
        [
            "<details><summary>Round trip of each call as the clients saw it, p50 / p99 (ms)</summary>",
            "",
            _table(["scenario: call", R["labels"]["casque"], R["labels"]["elasticmq"]], rows),
            "",
            "Timed around each aiobotocore call in the bench process (its own waits for the CPU included). "
            "ReceiveMessage "
            "counts only answers with messages, but those include the long poll's wait for a group to be free (a "
            "receive "
            "parked while another receiver holds the group returns when it is deleted): on a FIFO queue it is not a "
            "cost.",
            "",
            "</details>",
        ]
    )


def section_sqs_fifo(R: dict[str, Any], img: str) -> str:
    z, mach, v = R["size"], R.get("machine", {}), R.get("versions", {})
    errors = [
        f"{R['labels'][s]}, {sc['label']}: {err}"
        for sc in R["scenarios"]
        for s, x in R["summary"].get(sc["key"], {}).items()
        for err in x["errors"]
    ]
    quick = " --quick" if z["name"].startswith("quick") else ""
    subset = "" if len(R["systems"]) == 2 else " --systems " + ",".join(R["systems"])
    command = R.get("command") or f"python -m bench --only sqs-fifo{quick}{subset}"
    out = [
        "## FIFO queues beside ElasticMQ (issue 25)",
        "",
        f"Run: **{z['name']} size**, {mach.get('date', '?')}, `{command}`. Machine: {mach.get('cpu', '?')}, load "
        "average "
        f"{mach.get('load_at_start', '?')} at the start (shared with other engineers' runs). casque "
        f"{v.get('casque', '?')}.",
        "",
        f"Per scenario, system and round: {_n(z['messages'])} messages on a fresh FIFO queue, sent with "
        "SendMessageBatch (10 per call, each "
        f"message with a MessageGroupId and its own MessageDeduplicationId) by {z['senders']} concurrent aiobotocore "
        "tasks, then received "
        f"(ReceiveMessage 10, long poll {R.get('wait_s', 1)} s, visibility {R.get('visibility_s', 120)} s"
        f"{', a ReceiveRequestAttemptId on each' if z.get('attempt_ids') else ''}) and deleted (DeleteMessageBatch) by "
        f"{z['receivers']} "
        "tasks until all came "
        f"back (or nothing came for {z['idle_s']:.0f} s). First {_n(z.get('warmup', 0))} messages through each server, "
        "not counted (JIT, "
        f"prepared statements); then {z['rounds']} round(s); every scenario runs on one server then the other, the "
        "first of the pair switching each time; the table gives the median msgs/s and the ledger summed over the "
        "rounds. Both servers "
        "listen on 127.0.0.1 for the whole run and are driven by the same client code. High throughput = "
        "DeduplicationScope "
        "messageGroup and FifoThroughputLimit perMessageGroupId.",
        "",
        sqs_fifo_table(R),
        "",
        "Ledger (bench/fifo_ledger.py, from what the receivers got, in arrival order): *lost* = sent and never "
        "received; *dup* = "
        "received again after its first delivery; *out of order* = first delivered after a later message of the same "
        "sender and "
        "group, or with a SequenceNumber not above one of its group already delivered.",
        "",
        f"![FIFO msgs/s, casque and ElasticMQ]({img}/bench-sqs-fifo.png)",
        "",
    ]
    out += [sqs_fifo_cpu(R), "", sqs_fifo_calls(R), ""]
    if errors:
        out += ["Failures (the error each failed run got):", "", *[f"- {e}" for e in errors], ""]
    out += [f"Raw results: bench/out/sqs-fifo-{z['name']}.json.", ""]
    return "\n".join(out)


def write_sqs_fifo(R: dict[str, Any], plots_dir: Path, to_docs: bool) -> Path:
    """The FIFO section between its own markers in docs/benchmarks.md (placed before the many-queues
    section the first time), or bench/out/report-sqs-fifo-<size>.md."""
    return _write_section(
        section_sqs_fifo(R, "."),
        f"report-sqs-fifo-{R['size']['name']}.md",
        plots_dir / "bench-sqs-fifo.png",
        FIFO_BEGIN,
        FIFO_END,
        to_docs,
        before=MQ_BEGIN,
    )
