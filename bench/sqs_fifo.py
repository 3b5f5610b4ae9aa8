"""FIFO queues beside ElasticMQ: ``python -m bench --only sqs-fifo [--quick] [--systems casque,elasticmq]``.

Issue 25's measure: FIFO send and receive+delete msgs/s with 1, 10 and 1,000 message groups, and
high-throughput mode (DeduplicationScope=messageGroup, FifoThroughputLimit=perMessageGroupId) at
1,000 groups, for ``casque serve`` and ElasticMQ in the same run, through boto3's async twin
(aiobotocore), so only the server differs. Both servers are up for the whole run (the launchers
of bench/sqs.py) and every scenario runs on one, then the other, the first of the pair switching
each time (casque, ElasticMQ, ElasticMQ, casque, ...): machine noise on this shared 2-core box hits
both alike. First ``warmup`` messages go through every server uncounted (ElasticMQ's JIT, casque's
prepared statements). Per scenario and system, on a fresh queue:

* send: ``senders`` tasks, each SendMessageBatch of 10 with a MessageGroupId and a unique
  MessageDeduplicationId per message; a call that gets no answer (transport error) is sent
  again with the same dedup ids, which is what they are for;
* receive+delete: ``receivers`` tasks, ReceiveMessage (10, long poll 1 s, visibility 120 s; no
  ReceiveRequestAttemptId unless ``--attempt-ids``) then DeleteMessageBatch, until every message sent
  came back or nothing came for ``idle_s``; msgs/s counts to the last delete. A receive whose
  answer is lost (transport error) is sent again; without attempt ids the messages of the lost
  answer stay in flight for the visibility timeout, and show as lost;
* the ledger (bench/fifo_ledger.py) counts from what was received: lost, duplicated and out of
  order (per sender and group, and per group by SequenceNumber). The table shows it beside the
  figures: a run that loses or reorders says so;
* beside them, to trace a ratio: each process's CPU time per message (/proc), each call's round
  trip, the longest time without a delivery, and with ``--profile`` py-spy on casque serve.

Results: bench/out/sqs-fifo-<size>.json, the plot bench-sqs-fifo.png, and the section "FIFO queues
beside ElasticMQ" of docs/benchmarks.md (full size, or ``--write-docs``; else
bench/out/report-sqs-fifo-<size>.md). A scenario that fails on one system (an error answer) is
recorded with the error and the run goes on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from typing import Any

from aiobotocore.session import get_session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from . import profiling
from .env import cpu_seconds, machine, node_pid, out_dir, progress, versions
from .fifo_ledger import Delivery, Ledger, body_of, check, merge
from .sqs import CREDS, EMQ_VERSION, casque_serve, elasticmq

WAIT_S = 1  # long poll of each receive
VISIBILITY_S = 120  # far longer than a drain: a redelivery in the table is a real duplicate, not a slow client
TRANSPORT_RETRIES = 3
SYSTEMS: dict[str, tuple[str, Callable[..., Any]]] = {
    "casque": ("casque serve", casque_serve),
    "elasticmq": (f"ElasticMQ {EMQ_VERSION} (in memory)", elasticmq),
}


@dataclass(frozen=True)
class Scenario:
    key: str
    label: str
    groups: int
    high_throughput: bool = False

    def attributes(self) -> dict[str, str]:
        attrs = {"FifoQueue": "true"}
        if self.high_throughput:
            attrs |= {"DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"}
        return attrs


SCENARIOS = (
    Scenario("g1", "1 group", 1),
    Scenario("g10", "10 groups", 10),
    Scenario("g1000", "1,000 groups", 1000),
    Scenario("g1000-ht", "1,000 groups, high throughput", 1000, high_throughput=True),
)


@dataclass(frozen=True)
class Size:
    name: str
    messages: int  # per scenario, system and round (rounded down to whole batches of 10)
    rounds: int  # every scenario runs this many times on each system; the table shows the median
    senders: int
    receivers: int
    idle_s: float  # the drain ends when nothing has come for this long (what is left is lost)
    # a ReceiveRequestAttemptId on every receive: a receive retried after a transport error then gets the same messages
    # back; off by default, as most SDK users send none (it costs casque a Cassandra write per receive)
    attempt_ids: bool = False
    # messages through every server before the first measured run (ElasticMQ's JIT, casque's prepared statements)
    warmup: int = 1000


QUICK = Size("quick", messages=1000, rounds=1, senders=8, receivers=8, idle_s=20)
FULL = Size("full", messages=5000, rounds=3, senders=8, receivers=8, idle_s=30)


@dataclass
class Tally:
    """What one run saw, in the order it saw it (the ledger's input)."""

    sent: list[str] = field(default_factory=list)
    send_failed: int = 0
    deliveries: list[Delivery] = field(default_factory=list)
    delete_failed: int = 0
    retries: int = 0
    receives: int = 0  # ReceiveMessage calls...
    empty_receives: int = 0  # ...of which answered with no message (the group in flight elsewhere, or nothing left)
    call_s: dict[str, list[float]] = field(default_factory=dict)  # seconds per answered call, by action
    answers_at: list[float] = field(default_factory=list)  # perf_counter of every receive that brought messages

    def longest_pause_s(self, start: float) -> float:
        """The longest time without a delivery during the drain (from its start): a stall shows here, not in a mean."""
        times = [start, *self.answers_at]
        return max((b - a for a, b in zip(times, times[1:])), default=0.0)

    def latency_ms(self) -> dict[str, dict[str, float]]:
        """p50 / p99 of each action's answered calls, in ms (a long poll that found nothing counts apart)."""
        out = {}
        for name, xs in sorted(self.call_s.items()):
            ms = sorted(x * 1000 for x in xs)
            out[name] = {
                "count": len(ms),
                "p50": round(ms[len(ms) // 2], 2),
                "p99": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2),
            }
        return out

    def ledger(self) -> Ledger:
        led = check(self.sent, self.deliveries, self.send_failed)
        led.delete_failed, led.retries = self.delete_failed, self.retries
        return led


async def call(tally: Tally, fn: Callable[..., Awaitable[dict[str, Any]]], **params: Any) -> dict[str, Any]:
    """``fn(**params)``, again with the same parameters after a transport error (the dedup id or the
    receive attempt id makes the repeat safe); an error answer from the server is raised at once."""
    for attempt in range(TRANSPORT_RETRIES):
        try:
            t0 = time.perf_counter()
            out = await fn(**params)
            tally.call_s.setdefault(fn.__name__, []).append(time.perf_counter() - t0)
            return out
        except ClientError:
            raise
        except (TimeoutError, BotoCoreError, OSError):
            if attempt == TRANSPORT_RETRIES - 1:
                raise
            tally.retries += 1
    raise AssertionError("unreachable")


def group_of(sender: int, j: int, groups: int, senders: int) -> str:
    """The group of ``sender``'s j-th message. With at least as many groups as senders, each sender owns
    the groups ``g % senders == sender`` and cycles through them: every message of a group then comes
    from one sender, in an order the client knows, so the ledger's stream check covers every message
    (not only the server's SequenceNumbers). With fewer groups (1 of them: all eight senders in one
    group), senders share groups and the SequenceNumber check is what orders their messages."""
    if groups < senders:
        return f"g{sender % groups}"
    owned = range(sender, groups, senders)
    return f"g{owned[j % len(owned)]}"


async def send_all(c: Any, q: str, sc: Scenario, size: Size, tally: Tally, tag: str) -> float:
    batches = size.messages // 10

    async def sender(w: int) -> None:
        ks: Counter[str] = Counter()
        for b in range(batches // size.senders + (w < batches % size.senders)):
            entries = []
            for i in range(10):
                g = group_of(w, b * 10 + i, sc.groups, size.senders)
                entries.append(
                    {
                        "Id": str(i),
                        "MessageBody": body_of(w, g, ks[g]),
                        "MessageGroupId": g,
                        "MessageDeduplicationId": f"{tag}-{w}-{b}-{i}",
                    }
                )
                ks[g] += 1
            r = await call(tally, c.send_message_batch, QueueUrl=q, Entries=entries)
            ok = {e["Id"] for e in r.get("Successful", [])}
            tally.sent += [e["MessageBody"] for e in entries if e["Id"] in ok]
            tally.send_failed += len(r.get("Failed", []))

    t0 = time.perf_counter()
    await asyncio.gather(*(sender(w) for w in range(size.senders)))
    return time.perf_counter() - t0


async def drain(c: Any, q: str, size: Size, tally: Tally) -> float:
    """Receive and delete until every sent message came back or nothing came for ``idle_s``; the
    seconds from the start to the last delete."""
    expected = set(tally.sent)
    got: set[str] = set()
    t0 = time.perf_counter()
    last = [t0]

    async def receiver() -> None:
        while len(got) < len(expected) and time.perf_counter() - last[0] < size.idle_s:
            attempt = {"ReceiveRequestAttemptId": uuid.uuid4().hex} if size.attempt_ids else {}
            r = await call(
                tally,
                c.receive_message,
                QueueUrl=q,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=WAIT_S,
                VisibilityTimeout=VISIBILITY_S,
                MessageSystemAttributeNames=["MessageGroupId", "SequenceNumber"],
                **attempt,
            )
            msgs = r.get("Messages", [])
            tally.receives += 1
            if not msgs:
                tally.empty_receives += 1
                # the sample call() just added (nothing awaited since) is a long poll's wait, not a receive's cost
                tally.call_s.setdefault("receive_message (empty)", []).append(tally.call_s["receive_message"].pop())
                continue
            tally.answers_at.append(time.perf_counter())
            for m in msgs:  # appended before the delete is sent: the group's next delivery can only come after it
                attrs = m.get("Attributes", {})
                tally.deliveries.append(Delivery(m["Body"], attrs.get("MessageGroupId"), attrs.get("SequenceNumber")))
                if m["Body"] in expected:
                    got.add(m["Body"])
            d = await call(
                tally,
                c.delete_message_batch,
                QueueUrl=q,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)],
            )
            tally.delete_failed += len(d.get("Failed", []))
            last[0] = time.perf_counter()

    await asyncio.gather(*(receiver() for _ in range(size.receivers)))
    return last[0] - t0


@dataclass(frozen=True)
class Server:
    system: str  # a key of SYSTEMS
    url: str
    pid: int  # the server process (the JVM for ElasticMQ), to read its CPU time and profile it


def cpu_now(server: Server) -> dict[str, float]:
    """CPU seconds so far of the server, the local Cassandra node (casque's store; idle but for other
    engineers' tests during an ElasticMQ run) and this bench process (the clients)."""
    node = node_pid()
    return {
        "server": cpu_seconds([server.pid]),
        "cassandra": cpu_seconds([node]) if node else 0.0,
        "client": time.process_time(),
    }


def cpu_used(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before[k], 3) for k in before}


async def measure_queue(
    c: Any, q: str, server: Server, sc: Scenario, size: Size, tally: Tally, tag: str
) -> dict[str, Any]:
    """Send, then drain, on a fresh queue: rates, ledger, the server's receive pattern and CPU time per phase."""
    await c.receive_message(QueueUrl=q, WaitTimeSeconds=0)  # the first visit of every row, as in bench/sqs.py
    c0 = cpu_now(server)
    send_s = await send_all(c, q, sc, size, tally, tag)
    c1 = cpu_now(server)
    t_drain = time.perf_counter()
    receive_s = await drain(c, q, size, tally)
    c2 = cpu_now(server)
    led = tally.ledger()
    return {
        "send_s": send_s,
        "receive_s": receive_s,
        "send_per_s": round(led.sent / send_s, 1),
        "receive_delete_per_s": round(led.received / receive_s, 1) if receive_s > 0 else 0.0,
        "ledger": led.as_dict(),
        "receives": tally.receives,
        "empty_receives": tally.empty_receives,
        "per_receive": round(len(tally.deliveries) / max(1, tally.receives - tally.empty_receives), 2),
        "call_ms": tally.latency_ms(),
        "longest_pause_s": round(tally.longest_pause_s(t_drain), 3),
        "cpu_s": {"send": cpu_used(c0, c1), "receive_delete": cpu_used(c1, c2)},
    }


async def run_one(server: Server, sc: Scenario, size: Size, round_no: int) -> dict[str, Any]:
    """One scenario on one server, on a queue of its own: the figures and the ledger, or the error."""
    out: dict[str, Any] = {"system": server.system, "scenario": sc.key, "round": round_no}
    cfg = Config(max_pool_connections=2 * (size.senders + size.receivers), retries={"max_attempts": 1}, read_timeout=60)
    tally = Tally()
    tag = uuid.uuid4().hex[:8]
    async with get_session().create_client("sqs", endpoint_url=server.url, config=cfg, **CREDS) as c:
        q = None
        try:
            q = (await c.create_queue(QueueName=f"bench-fifo-{sc.key}-{tag}.fifo", Attributes=sc.attributes()))[
                "QueueUrl"
            ]
            out.update(await measure_queue(c, q, server, sc, size, tally, tag))
        except (TimeoutError, ClientError, BotoCoreError, OSError) as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"
            out["ledger"] = tally.ledger().as_dict()  # what was sent or received before it
        finally:
            if q is not None:
                try:
                    await c.delete_queue(QueueUrl=q)
                except (ClientError, BotoCoreError, OSError):
                    pass
    return out


async def run_profiled(server: Server, sc: Scenario, size: Size, round_no: int) -> dict[str, Any]:
    """:func:`run_one` with py-spy sampling the server (bench/profiling.py); the analysed profile in ``profile``."""
    d = out_dir("sqs-fifo")
    raw = d / f"profile-{server.system}-{sc.key}.txt"
    with profiling.recording(server.pid, raw, d / f"py-spy-{server.system}-{sc.key}.log"):
        r = await run_one(server, sc, size, round_no)
    r["profile"] = profiling.analyse(raw) if raw.exists() else {"error": f"py-spy wrote no profile: see {d}"}
    return r


def _order(systems: list[str], step: int) -> list[str]:
    return systems if step % 2 == 0 else systems[::-1]


async def measure(servers: dict[str, Server], size: Size, profile: bool = False) -> list[dict[str, Any]]:
    """Every scenario on every server, ``size.rounds`` times, alternating which server goes first; with
    ``profile``, casque serve is sampled by py-spy in the first round (the JVM of ElasticMQ is not)."""
    runs: list[dict[str, Any]] = []
    warm = Size("warm-up", size.warmup, 1, size.senders, size.receivers, size.idle_s, size.attempt_ids)
    for (
        system,
        server,
    ) in servers.items():  # ElasticMQ's first run was 3-4x slower than its third (JIT): warm every server alike
        progress(
            f"sqs-fifo warm-up: {warm.messages} messages, {SCENARIOS[1].label}, on {SYSTEMS[system][0]} (not counted)"
        )
        await run_one(server, SCENARIOS[1], warm, 0)
    step = 0
    for round_no in range(1, size.rounds + 1):
        for sc in SCENARIOS:
            for system in _order(list(servers), step):
                progress(f"sqs-fifo round {round_no}/{size.rounds}: {sc.label} on {SYSTEMS[system][0]}")
                spy = profile and round_no == 1 and system == "casque"
                r = await (run_profiled if spy else run_one)(servers[system], sc, size, round_no)
                progress(
                    "  "
                    + (
                        f"FAILED: {r['error']}"
                        if "error" in r
                        else f"send {r['send_per_s']:,.0f} msgs/s, receive+delete {r['receive_delete_per_s']:,.0f} "
                        f"msgs/s "
                        f"({r['per_receive']} per non-empty receive, {r['empty_receives']} of {r['receives']} empty, "
                        f"longest pause {r['longest_pause_s']:.2f} s), "
                        f"ledger {_ledger_line(r['ledger'])}; server CPU {r['cpu_s']['send']['server']:.1f} s + "
                        f"{r['cpu_s']['receive_delete']['server']:.1f} s"
                    )
                )
                runs.append(r)
            step += 1
    return runs


def _ledger_line(led: dict[str, int]) -> str:
    return f"sent {led['sent']}, lost {led['lost']}, dup {led['duplicates']}, out of order {led['out_of_order']}"


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per scenario and system: the median msgs/s over the rounds that ran, the ledgers summed, the errors."""
    out: dict[str, dict[str, Any]] = {}
    for sc in SCENARIOS:
        for system in SYSTEMS:
            mine = [r for r in runs if r["scenario"] == sc.key and r["system"] == system]
            if not mine:
                continue
            ok = [r for r in mine if "error" not in r]
            out.setdefault(sc.key, {})[system] = {
                "rounds": len(mine),
                "send_per_s": statistics.median(r["send_per_s"] for r in ok) if ok else None,
                "receive_delete_per_s": statistics.median(r["receive_delete_per_s"] for r in ok) if ok else None,
                "ledger": merge(Ledger(**r["ledger"]) for r in mine).as_dict(),
                "errors": sorted({r["error"] for r in mine if "error" in r}),
                "cpu_ms_per_msg": cpu_per_message(ok),
                "longest_pause_s": max((r["longest_pause_s"] for r in ok if "longest_pause_s" in r), default=None),
                "call_ms": {
                    name: {
                        q: statistics.median(r["call_ms"][name][q] for r in ok if name in r.get("call_ms", {}))
                        for q in ("p50", "p99")
                    }
                    for name in sorted({n for r in ok for n in r.get("call_ms", {})})
                },
            }
    return out


def cpu_per_message(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """CPU ms per message of each process in each phase, over the runs that completed (sent / received messages)."""
    out: dict[str, dict[str, float]] = {}
    for phase, count in (("send", "sent"), ("receive_delete", "received")):
        n = sum(r["ledger"][count] for r in runs if "cpu_s" in r)
        if n:
            out[phase] = {
                k: round(1000 * sum(r["cpu_s"][phase][k] for r in runs if "cpu_s" in r) / n, 3)
                for k in ("server", "cassandra", "client")
            }
    return out


def run(size: Size, systems: list[str], profile: bool = False) -> dict[str, Any]:
    """Start the servers (all up for the whole run), measure, and return the results."""
    started = machine()
    with ExitStack() as stack:
        servers = {}
        for s in systems:
            pids: list[int] = []
            url = stack.enter_context(SYSTEMS[s][1](pids))
            servers[s] = Server(s, url, pids[0])
        runs = asyncio.run(measure(servers, size, profile))
    return {
        "size": asdict(size),
        "systems": systems,
        "labels": {s: SYSTEMS[s][0] for s in SYSTEMS},
        "scenarios": [asdict(sc) for sc in SCENARIOS],
        "visibility_s": VISIBILITY_S,
        "wait_s": WAIT_S,
        "machine": started,
        "versions": versions(),
        "command": command_line(),
        "runs": runs,
        "summary": summarize(runs),
    }


def command_line() -> str:
    """How this run was started, as the docs section quotes it."""
    module = "bench" if sys.argv[0].endswith("__main__.py") else "bench.sqs_fifo"
    return " ".join(["python -m", module, *sys.argv[1:]])


def part(size: Size, systems: list[str], to_docs: bool, report_only: bool = False, profile: bool = False) -> int:
    """The part as ``python -m bench --only sqs-fifo`` runs it: measure (unless report_only), save, plot,
    write the section."""
    from . import plots, report

    path = out_dir() / f"sqs-fifo-{size.name}.json"
    if report_only:
        if not path.exists():
            progress(f"sqs-fifo: no saved results in {path}: nothing to re-render")
            return 0
        R = json.loads(path.read_text())
    else:
        R = run(size, systems, profile)
        path.write_text(json.dumps(R, indent=1, default=str))
    plots.fifo_throughput(R, out_dir() / "bench-sqs-fifo.png")
    print(report.sqs_fifo_table(R))
    target = report.write_sqs_fifo(R, out_dir(), to_docs)
    progress(f"sqs-fifo: results {path}, report {target}")
    bad = [
        f"{k}/{s}"
        for k, per in R["summary"].items()
        for s, v in per.items()
        if v["errors"] or not Ledger(**v["ledger"]).clean
    ]
    if bad:
        progress(f"sqs-fifo: failed or unclean: {', '.join(bad)}")
    return 1 if bad else 0


def parse_systems(text: str) -> list[str]:
    systems = [s.strip().lower() for s in text.split(",") if s.strip()]
    unknown = set(systems) - set(SYSTEMS)
    if unknown or not systems:
        raise SystemExit(f"bench: --systems takes {', '.join(SYSTEMS)} (comma-separated), not {text!r}")
    return systems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.sqs_fifo", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help=f"{QUICK.messages} messages per run, {QUICK.rounds} round")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="which servers: casque, elasticmq or both (default)")
    p.add_argument("--messages", type=int, help="messages per scenario, system and round (overrides the size's)")
    p.add_argument("--rounds", type=int, help="rounds (overrides the size's)")
    p.add_argument(
        "--write-docs", action="store_true", help="write the section of docs/benchmarks.md even for the quick size"
    )
    p.add_argument("--report-only", action="store_true", help="re-render from bench/out/sqs-fifo-<size>.json")
    p.add_argument("--attempt-ids", action="store_true", help="send a ReceiveRequestAttemptId with every receive")
    p.add_argument(
        "--profile",
        action="store_true",
        help="py-spy on casque serve during its first-round runs (needs py-spy on PATH)",
    )
    args = p.parse_args(argv)
    size = QUICK if args.quick else FULL
    if args.messages or args.rounds:
        size = Size(
            f"{size.name}-custom",
            args.messages or size.messages,
            args.rounds or size.rounds,
            size.senders,
            size.receivers,
            size.idle_s,
        )
    if args.attempt_ids:
        size = Size(
            f"{size.name}-attempt-ids",
            size.messages,
            size.rounds,
            size.senders,
            size.receivers,
            size.idle_s,
            attempt_ids=True,
        )
    return part(
        size,
        parse_systems(args.systems),
        to_docs=args.write_docs or size is FULL,
        report_only=args.report_only,
        profile=args.profile,
    )


if __name__ == "__main__":
    sys.exit(main())
