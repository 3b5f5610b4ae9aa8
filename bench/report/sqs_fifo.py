"""The FIFO queues section beside ElasticMQ (bench/sqs_fifo.py), written between its own markers by its
own run, before the many-queues section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .many_queues import MQ_BEGIN
from .markdown import _n, _table, _write_section

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
        "## FIFO queues beside ElasticMQ",
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
