"""The many-queues section (bench/many_queues.py), written between its own markers by its own run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .markdown import _ms, _n, _table, _write_section

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
            f"({_whose(t)}): {_n(t.get('bytes_per_partition'), 1)} bytes "
            "per queue row, "
            f"so about {_n((t.get('bytes_per_partition') or 0) * 1e6 / 2**20)} MiB per million queues"
            + _per_queue(t.get("per_queue"))
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
            "server RSS vs queues it has served (last process), at its defaults",
            f"{_n(at.get('25%'), 1)} / {_n(at.get('50%'), 1)} / {_n(at.get('75%'), 1)} / {_n(at.get('100%'), 1)} MB at "
            "25/50/75/100 % of "
            f"{_n(rss.get('queues_touched'))} queues: {_n(rss.get('growth_second_half_mb'), 1)} MB growth over the "
            f"second half; peak {_n(rss.get('peak_mb'), 1)} MB",
        ],
        _noisy_row(R.get("noisy")),
        _idle_row(R.get("idle"), R.get("keyspace", "?")),
        _drain_row(R.get("drain"), z),
        [
            "the server's warnings and errors (its logs, by event)",
            "; ".join(f"{k} {_n(v)}" for k, v in (R.get("server_log") or {}).items()) or "none",
        ],
        [
            "ledger",
            f"sent {_n(led['sent'])}, deleted {_n(led['deleted'])}, **lost {led['lost']}**, duplicate deliveries "
            f"{led['duplicate_deliveries']}, "
            f"deleted twice {led['deleted_twice']}",
        ],
    ]
    out = [
        "## Many queues",
        "",
        f"Run: **{z['name']} size**, {R['started']}, `python -m bench "
        f"many-queues{_flag(z['name'])}`. Machine: "
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
        _mq_parked(R.get("parked")),
        _mq_light(R.get("light")),
        _mq_baseline(R.get("baseline")),
        f"Full size (1,000,000 queues, 1,000,000 messages; {_full_scaled(z)}; about "
        f"{_n(R.get('full_expected_min'))} min here by this run's rates{_phases(R)}): "
        "`python -m bench many-queues --write-docs`.",
        "",
    ]
    return "\n".join(out)


def _full_scaled(z: dict[str, Any]) -> str:
    """What the full size scales from the issue's, and why (bench/mq_sizes.py ``FULL_SCALED``)."""
    from ..mq_sizes import FULL

    return z.get("scaled") or FULL.scaled


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


def _mq_baseline(B: dict[str, Any] | None) -> str:
    """One paragraph on the run kept as bench/out/many-queues-<size>-before.json (the grey line)."""
    if not B:
        return ""
    at, by = B["rss"].get("rss_mb_at", {}), B["reads"]
    return (
        f"The grey line: the same bench on an earlier engine ({B['engine']}, {B['started']}; "
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


def _per_queue(P: dict[str, Any] | None) -> str:
    """Bytes per queue over every table a creation writes (bench/many_queues.py ``per_queue_bytes``)."""
    if not P or P.get("bytes_per_queue") is None:
        return ""
    tables = ", ".join(f"{k} {_n(v)}" for k, v in P["after"].items())
    where = "a keyspace of its own" if P["fresh"] else "a reused keyspace, where compaction can move it"
    per = _n(P["bytes_per_queue"], 1)
    return f". Over every table a creation writes ({tables} bytes), {per} bytes per queue ({where})"


def _noisy_row(N: dict[str, Any] | None) -> list[str]:
    """The noisy-neighbour figure (bench/mq_noisy.py): B's single messages, A's queue empty vs A draining."""
    if not N:
        return ["noisy neighbour", "not measured in this run"]
    q, n, b = N["quiet"], N["noisy"], N["behind"]
    return [
        f"noisy neighbour: user A drains a backlog of {_n(N['backlog'])} from A's queue ({N['consumers']} receivers) "
        "while user B, long-polling B's own queue on the same server, gets single messages",
        f"B's send→receive with A's queue empty: p50 {_ms(q['p50_ms'])}, p99 {_ms(q['p99_ms'])} ({_n(q['count'])}); "
        f"over A's drain: p50 {_ms(n['p50_ms'])}, p99 {_ms(n['p99_ms'])} ({_n(n['count'])}, sent with "
        f"{_n(n['at_last'])}–{_n(n['backlog_at_first'])} of A's messages left; A drained {_n(N['drain_rate'])} msg/s "
        f"in {_n(N['drain_s'])} s). Behind A's backlog B would have waited p50 {_ms(b['p50_ms'])}, "
        f"up to {_ms(b['max_ms'])}" + _node_read(N),
    ]


def _node_read(N: dict[str, Any]) -> str:
    """The node's read round trip beside B's probes, quiet and over A's drain: the shared part of B's time."""
    q, n = N.get("node_read_quiet") or {}, N.get("node_read_noisy") or {}
    if not q.get("count") or not n.get("count"):
        return ""
    return (
        f". A read of one row from the bench, beside each of B's messages: p50 {_ms(q['p50_ms'])} with A's queue "
        f"empty, {_ms(n['p50_ms'])} over A's drain"
    )


def _idle_row(I: dict[str, Any] | None, keyspace: str) -> list[str]:  # noqa: E741
    """Reads while every queue sits idle (bench/mq_idle.py): the node's own count and the server's."""
    if not I:
        return ["reads while idle", "not measured in this run"]
    tables = ", ".join(f"{k} {v}" for k, v in sorted(I["by_table"].items(), key=lambda kv: -kv[1])) or "none"
    return [
        f"Cassandra reads while the queues sit idle ({_n(I['seconds'])} s, server up, no client"
        + (f", from {_n(I['settle_s'])} s after the last request" if I.get("settle_s") else "")
        + ")",
        f"{_n(I['node_reads_per_s'], 2)} reads/s on the node in `{keyspace}` (system_views local read + scan "
        f"counts; by table: {tables}); the server sent {_n(I['server_cql_reads_per_s'], 2)} CQL reads/s"
        + _top(I.get("server_reads_by_statement"), "its reads by statement")
        + _top(I.get("server_by_caller"), "its requests by the engine function that sent them")
        + _sweep_share(I),
    ]


def _sweep_share(I: dict[str, Any]) -> str:  # noqa: E741
    """How much of the idle reads the low-watermark sweep sent (engine/consume/sweep.py), when it sent any."""
    by = I.get("server_by_caller") or {}
    sweep = sum(v for k, v in by.items() if k.startswith("sweep."))
    total = sum(by.values())
    if not sweep or not total:
        return ""
    return (
        f". {100 * sweep / total:.0f} % of the server's requests in the window came from the low-watermark sweep "
        "(engine/consume/sweep.py): every 30 s it reads the rows of the queues the server keeps (its "
        "`cache.consumers` LRU) that have not settled (swept up to a cursor more than 60 s old, nothing live "
        "above it); a settled row rests until a trace of a write (a send, hint or take of this process, a new "
        "entry of another in `active_queues`) or its recheck 3-6 h later"
    )


def _top(counts: dict[str, int] | None, what: str, n: int = 3) -> str:
    if not counts:
        return ""
    return f"; {what}: " + "; ".join(f"`{k}` {_n(v)}" for k, v in list(counts.items())[:n])


def _drain_row(D: dict[str, Any] | None, z: dict[str, Any]) -> list[str]:
    """What the drain visited: the queues still owed messages, and samples of drained and idle queues."""
    if not D or "swept" not in D:
        return ["drain", "every queue visited"]
    return [
        "drain: every queue the ledger still has messages in; samples of the queues already drained "
        f"(checked empty) and of idle queues, {_n(z['idle_sample'])} each",
        f"{_n(D['swept'])} queues ({_n(D['swept_busy'])} drained, {_n(D.get('checked'))} checked, "
        f"{_n(D['swept_idle'])} idle) in {_n(D['sweep_seconds'])} s; after a visibility timeout "
        f"{_n(D['queues_rechecked'])} re-checked; {_n(D['seconds'])} s in all",
    ]


def _flag(size: str) -> str:
    """The command-line option that runs ``size``."""
    return {"quick": " --quick", "full": ""}.get(size, f" --size {size}")


def _mq_parked(P: dict[str, Any] | None) -> str:
    """The parked-polls part (bench/mq_parked.py): can one process hold the full size's users' long polls?"""
    if not P:
        return ""
    pk, srv, w = P["parked"], P.get("server") or {}, P.get("wake") or {}
    polls = (srv.get("tally") or {}).get("empty_long_poll") or [0, 0, 0]
    reads = _n(polls[2] / polls[0], 2) if polls[0] else "–"
    wake = (
        f"A send to one more parked owner reached it in {_ms(w.get('send_to_receive_ms'))}"
        if w.get("received")
        else "A send to one more parked owner was not answered within the client's timeout"
    )
    return (
        f"Parked long polls (`python -m bench --only parked`, {_n(P['users'])} users): one bench process opened "
        f"{_n(P['users'])} connections to one `casque serve` at once, each a ReceiveMessage with WaitTimeSeconds "
        f"{P['wait_s']} on its own tiny queue (open-files limit {P['fd_limit'][0]:,}); RSS with all of them open: "
        f"bench {_n(P['rss_mb'].get('bench'), 1)} MB, server {_n(P['rss_mb'].get('server'), 1)} MB. The server "
        f"answered {_n(polls[0])} of them as empty long polls, {reads} CQL reads each (each poll the first on its "
        f"queue: nothing cached); {_n(pk['empty'])} answers reached the client within "
        f"its timeout of the wait + 60 s, {_n(pk['gone'])} did not (the last at {_n(pk['last_answer_s'])} s): "
        f"arriving all at once, every first poll's cold reads wait their turn at the node. {wake}. Hence the "
        "users' ramp online (`ramp_s`) at full size." + _parked_costs(P) + "\n"
    )


def _parked_costs(P: dict[str, Any]) -> str:
    """What parked and idle owners cost (bench/mq_parked.py ``engine_parked``, ``online_idle``), when measured."""
    eng, idle = P.get("in_process"), P.get("idle")
    out = ""
    if eng:
        out += (
            f" Parked in one process through the engine ({_n(P['users'])} receives, {_n(eng['seconds'])} s): "
            f"{_n(eng['reads_per_s'], 1)} CQL reads/s, {eng['timers']} loop timers, "
            f"{_n(100 * eng['cpu_share'], 1)} % of a core."
        )
    if idle:
        out += (
            f" Online and idle over SQS ({_n(idle['seconds'])} s, each owner polling again at once): "
            f"{_n(idle['cql_reads_per_s'], 1)} reads/s at {_n(idle['empty_polls_per_s'])} empty polls/s, server "
            f"{_n(100 * idle['server_cpu_share'])} % of a core."
        )
    return out


def _whose(t: dict[str, Any]) -> str:
    """Whose partitions the ``queues`` table held when measured."""
    if (t.get("per_queue") or {}).get("fresh"):
        return "this run's queues only: a keyspace of its own"
    return "this run's queues and the deleted rows of earlier runs"


def _phases(R: dict[str, Any]) -> str:
    """The full size's minutes phase by phase, from this run's rates (bench/mq_estimate.py)."""
    from ..mq_estimate import phases_s, rates

    if "swept" not in (R.get("drain") or {}):
        return ""
    mins = {k: v / 60 for k, v in phases_s(rates(R)).items()}
    return ", phase by phase in bench/mq_estimate.py: " + ", ".join(f"{k} {_n(v, 1)}" for k, v in mins.items())
