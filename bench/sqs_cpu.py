"""Part "sqs-cpu": the server's CPU per SQS request, by kind (``python -m bench --only sqs-cpu``, or
``python -m bench.sqs_cpu [--requests N] [--rounds R] [--vs CHECKOUT] [--profile KIND]``).

One ``casque serve`` (keyspace casque_bench_cpu, ``sqs.auth = none``, one standard queue made by CreateQueue) is
driven by ``--connections`` tasks of the lean JSON client (bench/sqs_json.py) with one kind of request at a time:
  * send: SendMessage, one message;
  * batch: SendMessageBatch of 10 (its figures are per message);
  * receive: ReceiveMessage of an empty queue with WaitTimeSeconds 0 (a request that finds nothing: the floor).
The figure is the server process's CPU time (utime + stime, /proc) over ``--requests`` requests of a kind, after a
warm-up, per request (per message for batch). The kinds take turns within a round; each round is a fresh server.
``--vs CHECKOUT``: a second server from that checkout's code (a worktree of another commit) in every round, the
order of the two switching round by round: the A/B of a change in one run, its ratios taken round by round.
``--profile KIND``: py-spy samples the server (of this checkout) through a longer run of that kind; the stacks are
reduced as the profile part's are (bench/profiling.py: by library, and by casque function).
Results: bench/out/sqs/sqs_cpu.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .env import ROOT, cpu_seconds, out_dir, progress
from .sqs import casque_serve
from .sqs_json import ServerGone, SqsJson

KEYSPACE = "casque_bench_cpu"
KINDS = ("send", "batch", "receive")
PER_REQUEST = {"send": 1, "batch": 10, "receive": 1}
WARMUP = 300


def _request(kind: str, n: int) -> tuple[str, dict[str, Any]]:
    if kind == "send":
        return "SendMessage", {"MessageBody": f"m{n}"}
    if kind == "batch":
        return "SendMessageBatch", {"Entries": [{"Id": str(i), "MessageBody": f"m{n}-{i}"} for i in range(10)]}
    return "ReceiveMessage", {"WaitTimeSeconds": 0, "MaxNumberOfMessages": 10}


async def drive(client: SqsJson, queue: str, kind: str, n: int, connections: int) -> int:
    """``n`` requests of ``kind``, ``connections`` at a time; a request the server could not serve (a 5xx: the
    shared node overloaded) is retried, at most 3 times. Returns the retries."""
    counter = iter(range(n))
    retries = 0

    async def one_connection() -> None:
        nonlocal retries
        for i in counter:
            action, params = _request(kind, i)
            for attempt in range(4):
                try:
                    out = await client.call(action, queue, **params)
                    break
                except ServerGone:
                    if attempt == 3:
                        raise
                    retries += 1
            if kind == "batch" and len(out.get("Successful", [])) != 10:
                raise RuntimeError(f"a batch was not sent whole: {out}")

    await asyncio.gather(*(one_connection() for _ in range(connections)))
    return retries


async def measure(url: str, pid: int, requests: int, connections: int) -> dict[str, Any]:
    """Each kind's server CPU per message (ms), and the client's (this process) beside it."""
    client = SqsJson(url, connections, timeout_s=60)
    stamp = time.strftime("%H%M%S")
    queues = {"send": f"cpu-send-{stamp}", "receive": f"cpu-empty-{stamp}"}
    try:
        for q in queues.values():
            await client.call("CreateQueue", q, QueueName=q, Attributes={"MessageRetentionPeriod": "600"})
        out: dict[str, Any] = {}
        for kind in KINDS:
            queue = queues["receive" if kind == "receive" else "send"]
            await drive(client, queue, kind, WARMUP, connections)
            c0, t0, mine0 = cpu_seconds([pid]), time.perf_counter(), time.process_time()
            retries = await drive(client, queue, kind, requests, connections)
            cpu, wall, mine = cpu_seconds([pid]) - c0, time.perf_counter() - t0, time.process_time() - mine0
            messages = requests * PER_REQUEST[kind]
            out[kind] = {
                "requests": requests,
                "server_cpu_ms": 1000 * cpu / messages,
                "client_cpu_ms": 1000 * mine / messages,
                "per_s": messages / wall,
                "retries": retries,
            }
        for q in queues.values():
            await client.call("DeleteQueue", q)
    finally:
        await client.close()
    out["single_over_batched"] = out["send"]["server_cpu_ms"] / out["batch"]["server_cpu_ms"]
    return out


def one(root: Path, requests: int, connections: int) -> dict[str, Any]:
    pids: list[int] = []
    with casque_serve(pids, keyspace=KEYSPACE, root=root) as url:
        return asyncio.run(measure(url, pids[0], requests, connections))


def spread(values: list[float], digits: int = 3) -> dict[str, float]:
    return {
        "min": round(min(values), digits),
        "median": round(statistics.median(values), digits),
        "max": round(max(values), digits),
    }


def summarize(rounds: list[dict[str, Any]], label: str) -> dict[str, Any]:
    mine = [r[label] for r in rounds]
    out: dict[str, Any] = {k: spread([r[k]["server_cpu_ms"] for r in mine]) for k in KINDS}
    out["client"] = {k: spread([r[k]["client_cpu_ms"] for r in mine]) for k in KINDS}
    out["single_over_batched"] = spread([r["single_over_batched"] for r in mine], 2)
    return out


def run(requests: int, rounds: int, connections: int, vs: Path | None) -> dict[str, Any]:
    servers = {"A": ROOT} | ({"B": vs} if vs else {})
    results: list[dict[str, Any]] = []
    for r in range(rounds):
        order = list(servers) if r % 2 == 0 else list(reversed(servers))
        row: dict[str, Any] = {"first": order[0]}
        for label in order:
            progress(f"sqs-cpu round {r + 1}/{rounds}: {label} ({servers[label]}), {requests:,} requests of each kind")
            row[label] = one(servers[label], requests, connections)
            progress(
                f"  {label}: "
                + ", ".join(f"{k} {row[label][k]['server_cpu_ms']:.3f} ms" for k in KINDS)
                + f" per message; single / batched {row[label]['single_over_batched']:.2f}x"
            )
        results.append(row)
    R: dict[str, Any] = {
        "requests": requests,
        "rounds": rounds,
        "connections": connections,
        "servers": {k: str(v) for k, v in servers.items()},
        "results": results,
        "A": summarize(results, "A"),
    }
    if vs:
        R["B"] = summarize(results, "B")
        R["A_over_B"] = {
            k: spread([row["A"][k]["server_cpu_ms"] / row["B"][k]["server_cpu_ms"] for row in results], 2)
            for k in KINDS
        }
    return R


def profile(kind: str, requests: int, connections: int) -> dict[str, Any]:
    """py-spy on a server of this checkout while it serves ``requests`` of ``kind`` (after a warm-up)."""
    from .profiling import analyse, py_spy

    raw = out_dir("sqs") / f"sqs_cpu_profile_{kind}.txt"
    raw.unlink(missing_ok=True)
    pids: list[int] = []
    with casque_serve(pids, keyspace=KEYSPACE) as url:

        async def load() -> None:
            client = SqsJson(url, connections, timeout_s=60)
            q = f"cpu-prof-{time.strftime('%H%M%S')}"
            try:
                await client.call("CreateQueue", q, QueueName=q, Attributes={"MessageRetentionPeriod": "600"})
                await drive(client, q, kind, WARMUP, connections)
                spy = subprocess.Popen(
                    [
                        py_spy(),
                        "record",
                        "--pid",
                        str(pids[0]),
                        "--rate",
                        "250",
                        "--format",
                        "raw",
                        "--threads",
                        "--gil",
                        "--nonblocking",
                    ]
                    + ["--output", str(raw)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                await asyncio.sleep(1.0)  # let it attach
                await drive(client, q, kind, requests, connections)
                spy.send_signal(signal.SIGINT)  # py-spy writes its file on an interrupt
                spy.wait(60)
                await client.call("DeleteQueue", q)
            finally:
                await client.close()

        asyncio.run(load())
    return analyse(raw) if raw.exists() else {"error": "py-spy wrote no profile"}


def table(R: dict[str, Any]) -> str:
    """The kinds' server CPU per message (min / median / max over the rounds), and A/B when there is one."""
    names = {"send": "SendMessage", "batch": "SendMessageBatch of 10, per message", "receive": "empty ReceiveMessage"}
    labels = [label for label in ("A", "B") if label in R]
    heads = ["request"] + [f"server CPU ms per message ({label})" for label in labels]
    if "A_over_B" in R:
        heads.append("A / B, round by round")
    rows = ["| " + " | ".join(heads) + " |", "|" + " --- |" * len(heads)]

    def cell(s: dict[str, float]) -> str:
        return f"{s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f})"

    for k in KINDS:
        cells = [names[k]] + [cell(R[label][k]) for label in labels]
        if "A_over_B" in R:
            cells.append(
                f"{R['A_over_B'][k]['median']:.2f} ({R['A_over_B'][k]['min']:.2f}-{R['A_over_B'][k]['max']:.2f})"
            )
        rows.append("| " + " | ".join(cells) + " |")
    ratio = ["single / batched, per message"] + [
        f"{R[label]['single_over_batched']['median']:.2f}x ({R[label]['single_over_batched']['min']:.2f}-"
        f"{R[label]['single_over_batched']['max']:.2f})"
        for label in labels
    ]
    rows.append("| " + " | ".join(ratio + ([""] if "A_over_B" in R else [])) + " |")
    return "\n".join(rows)


def part(quick: bool) -> dict[str, Any]:
    """The part as ``python -m bench`` runs it: this checkout alone; ``ok`` when a single send costs at most twice a
    batched message."""
    R = run(1000 if quick else 3000, 1 if quick else 3, 4, None)
    (out_dir("sqs") / "sqs_cpu.json").write_text(json.dumps(R, indent=2))
    progress("sqs-cpu:\n" + table(R))
    R["ok"] = True  # a figure, not a fault: the target is judged in the report
    return R


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.sqs_cpu")
    p.add_argument("--requests", type=int, default=3000, help="requests of each kind per round (after a warm-up)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each a fresh server (with --vs: one of each)")
    p.add_argument("--connections", type=int, default=4, help="requests in flight at once")
    p.add_argument("--vs", type=Path, help="a checkout whose server is B: an A/B in one run")
    p.add_argument("--profile", choices=KINDS, help="py-spy on the server through a run of this kind instead")
    args = p.parse_args(argv)
    if args.profile:
        P = profile(args.profile, args.requests, args.connections)
        (out_dir("sqs") / f"sqs_cpu_profile_{args.profile}.json").write_text(json.dumps(P, indent=2))
        for section in ("components", "self", "casque_inclusive"):
            print(f"{section}:")
            for name, share in P.get(section, []):
                print(f"  {share:5.1f}%  {name}")
        return 0
    R = run(args.requests, args.rounds, args.connections, args.vs)
    (out_dir("sqs") / "sqs_cpu.json").write_text(json.dumps(R, indent=2))
    print(table(R))
    return 0


if __name__ == "__main__":
    sys.exit(main())
