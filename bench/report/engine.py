"""The engine parts' sections: end-to-end throughput and latency (swept over consumers and batch size),
pick-up latency and the take's cost, and scheduling lateness."""

from __future__ import annotations

from typing import Any

from .. import targets
from ..stats import fmt_ms
from .markdown import _lat, _ms, _n, _table


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


def section_pickup(R: dict[str, Any], before: dict[str, Any] | None = None) -> str:
    """Round trips per take and the idle daemon's requests; beside an earlier run's with ``--compare``."""
    from .summary import compared

    takes, idle = R.get("takes"), R.get("idle")
    if not takes and not idle:
        return ""
    base = before or {}
    f, bf = targets.figures(R), targets.figures(base) if before else {}

    def row(label: str, show: Any) -> list[str]:
        return [label, show(bf) if bf else "–", show(f)] if before else [label, show(f)]

    def cols(label: str, then: Any, now: Any) -> list[str]:
        return [label, then, now] if before else [label, now]

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
        "## 1c. Pickup cost: round trips per take, and the idle daemon",
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
        _table(["figure", compared(before), "this run"] if before else ["figure", "this run"], rows),
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
        then = (base.get("idle") or {}).get("engine_by_statement_per_s", {})
        names = list(idle["engine_by_statement_per_s"]) + [
            k for k in then if k not in idle["engine_by_statement_per_s"]
        ]
        out += [
            "What the idle daemon sends, per second:",
            "",
            _table(
                cols("statement (engine) or frame type (wire)", "before", "this run"),
                [cols(f"`{k}`", _num(then.get(k)), _num(idle["engine_by_statement_per_s"].get(k))) for k in names[:12]]
                + [
                    cols(f"wire: {k}", _num((base.get("idle") or {}).get("wire_by_type_per_s", {}).get(k)), _num(v))
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
                    cols("engine function", "before", "this run"),
                    [cols(f"`{k}`", _num(before_callers.get(k)), _num(callers.get(k))) for k in keys[:12]],
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
