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

This module holds the summary, the CLI and the part ``python -m bench`` calls; its parts live beside it:
bench/fifo_plan.py (systems, scenarios, sizes), fifo_client.py (the tally, senders and receivers) and
fifo_run.py (the measured run). Their names are re-exported here for bench/__main__.py and the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from contextlib import ExitStack
from dataclasses import asdict
from typing import Any

from .env import machine, out_dir, progress, saved_results, versions
from .fifo_client import Tally, call, drain, group_of, send_all
from .fifo_ledger import Ledger, merge
from .fifo_plan import FULL, QUICK, SCENARIOS, SYSTEMS, TRANSPORT_RETRIES, VISIBILITY_S, WAIT_S, Scenario, Size
from .fifo_run import Server, _order, cpu_now, cpu_used, measure, measure_queue, run_one, run_profiled

__all__ = [  # what bench/__main__.py and the tests import from here, as before the split
    "FULL",
    "QUICK",
    "SCENARIOS",
    "SYSTEMS",
    "TRANSPORT_RETRIES",
    "VISIBILITY_S",
    "WAIT_S",
    "Scenario",
    "Server",
    "Size",
    "Tally",
    "_order",
    "call",
    "command_line",
    "cpu_now",
    "cpu_per_message",
    "cpu_used",
    "drain",
    "group_of",
    "main",
    "measure",
    "measure_queue",
    "parse_systems",
    "part",
    "run",
    "run_one",
    "run_profiled",
    "send_all",
    "summarize",
]


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
        loaded = saved_results(path, "sqs-fifo")
        if loaded is None:
            return 0
        R = loaded
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
