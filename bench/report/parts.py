"""The sections of the parts after the profile: fair queues (8), the idle server settling (9), parked long polls
(10), the bulk load (11), the reliability soak (12), moto's SQS tests (13) and the server's CPU per SQS request
(14)."""

from __future__ import annotations

from typing import Any

from .many_queues import _mq_parked
from .markdown import _n, _table


def section_fair(R: dict[str, Any]) -> str:
    from ..fair_queues import table

    F = R.get("fair")
    if not F:
        return ""
    return "\n".join(
        [
            "## 8. Fair queues: a noisy tenant beside quiet ones",
            "",
            f"One standard queue, {F['receivers']} receivers (engine API, the pull path `casque serve` uses) deleting "
            f"in the background; {F['quiet_groups']} quiet tenants send {F['rounds']} messages each, one every 10 ms, "
            f"first alone, then after a noisy tenant's backlog of {_n(F['backlog'])} (bench/fair_queues.py). "
            "Latency: send → receive of the quiet tenants' messages; *overtook*: receives that started after a quiet "
            "message's send returned and ended before the one that got it.",
            "",
            table(F),
            "",
        ]
    )


def section_settle(R: dict[str, Any]) -> str:
    S = R.get("settle")
    if not S:
        return ""
    curve = ", ".join(f"{t:.0f} s: {r:.1f}" for t, r in S["curve"][:: max(1, len(S["curve"]) // 12)])
    state = (
        f"**settled {_n(S['settled_after_s'])} s after the last request**, then {_n(S['quiet_reads_per_s'], 2)} "
        "CQL reads/s"
        if S["settled"]
        else "**not settled within 15 minutes**"
    )
    return "\n".join(
        [
            "## 9. An idle server settling: CQL reads once its queues go idle",
            "",
            f"{_n(S['queues'])} tiny queues, one message each, received and deleted over SQS through one `casque "
            "serve` at its defaults (bench/mq_settle.py; "
            f" {_n(S['touch_s'])} s), then no client at all; "
            f"the server's own CQL reads counted every 10 s: {state}. Reads/s by seconds after the last request: "
            f"{curve}.",
            "",
        ]
    )


def section_parked(R: dict[str, Any]) -> str:
    P = R.get("parked")
    if not P:
        return ""
    return "\n".join(["## 10. Parked long polls: one process, one server", "", _mq_parked(P).strip(), ""])


def section_pipeline(R: dict[str, Any]) -> str:
    L = R.get("pipeline")
    if not L:
        return ""
    rows = [
        [r["method"], _n(r["rows"]), _n(r["seconds"], 1), _n(r["rows_per_s"]) if r["rows"] else "–"]
        for r in L["results"]
    ]
    return "\n".join(
        [
            "## 11. Bulk load: the Spark `load` job beside `send_many`",
            "",
            f"{_n(L['rows'])} unkeyed rows (~120-byte payloads) sent by the Python producer (`send_many`, chunks of "
            f"2,000, one loop and four) and loaded by `casque pipeline load` (Spark {L['master']}) into fresh queues "
            "of the bench keyspace, the same node, one run (bench/pipeline_load.py; docs/pipeline.md reads it).",
            "",
            _table(["method", "rows", "s", "rows/s"], rows),
            "",
        ]
    )


def section_soak(R: dict[str, Any]) -> str:
    S = R.get("soak")
    if not S:
        return ""
    rows = [
        [
            s["scenario"],
            _n(s["sent"]),
            f"**{_n(s['lost'])}**",
            _n(s["duplicated"]),
            f"**{_n(s['same_attempt_twice'])}**",
            _n(s["seconds"], 1),
        ]
        for s in S["scenarios"]
    ]
    return "\n".join(
        [
            "## 12. Reliability soak: faults at size",
            "",
            "The fault scenarios of tests/test_reliability.py at this mode's size (bench/soak.py): daemons killed "
            "with `kill -9` and restarted, daemons racing for two shards, daemons with skewed clocks on the local "
            "node; in full mode also a 3-node RF=3 cluster of its own losing a node (`kill -9`) and getting it back. "
            "Lost and duplicated are counted from the handlers' record; a duplicate is allowed only where a daemon "
            "was killed mid-run (a later attempt of its work). docs/reliability.md reads them.",
            "",
            _table(["scenario", "sent", "lost", "duplicated", "same attempt twice", "s"], rows),
            "",
        ]
    )


def section_moto(R: dict[str, Any]) -> str:
    M = R.get("moto-sqs")
    if not M:
        return ""
    c = M["counts"]
    rows = [
        [cause, _n(len(tests)), ", ".join(f"`{t}`" for t in tests[:6]) + (" …" if len(tests) > 6 else "")]
        for cause, tests in M["groups"].items()
    ]
    return "\n".join(
        [
            "## 13. moto's SQS tests against casque serve",
            "",
            f"moto's tests/test_sqs ({M['moto']}) in its server mode against a fresh `casque serve` "
            f"(bench/moto_sqs.py): **{_n(c.get('passed', 0))} passed, {_n(c.get('failed', 0))} failed, "
            f"{_n(c.get('error', 0))} errors**, "
            f"{_n(c.get('skipped', 0))} skipped, in {_n(M['seconds'], 1)} s. The failures by cause (the runner's "
            "first cut: (a) casque differs from SQS, (b) FIFO, (c) moto-specific; docs/sqs-moto.md is the reviewed "
            "reading):",
            "",
            _table(["cause", "tests", "which"], rows),
            "",
        ]
    )


def section_sqs_cpu(R: dict[str, Any]) -> str:
    from ..sqs_cpu import table

    C = R.get("sqs-cpu")
    if not C:
        return ""
    ratio = C["A"]["single_over_batched"]["median"]
    return "\n".join(
        [
            "## 14. The server's CPU per SQS request",
            "",
            f"One `casque serve` driven by {C['connections']} connections of the lean JSON client (bench/sqs_cpu.py), "
            f"{_n(C['requests'])} requests of each kind per round after a warm-up, {C['rounds']} round(s), each a "
            "fresh server; the figure is the server process's CPU time (/proc) per message: median (min-max). "
            f"Target (issue 48): a single SendMessage at most 2x a batched message's cost; this run: **{ratio:.2f}x**.",
            "",
            table(C),
            "",
        ]
    )
