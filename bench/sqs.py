"""The SQS endpoint side by side with ElasticMQ: ``python -m bench.sqs [--messages N]``.

Both servers run here on 127.0.0.1 and are driven by the same clients in one run:
  * send: SendMessageBatch (10 per call) from ``--concurrency`` aiobotocore tasks -> msgs/s;
  * receive-and-delete: ReceiveMessage (10, long poll 1 s) + DeleteMessageBatch from as many
    tasks until every message sent is consumed -> msgs/s (a ledger checks none is lost);
  * long-poll latency: a boto3 client parked in ReceiveMessage (WaitTimeSeconds 20) while another
    sends one message at a time; latency = received - sent, per message.
ElasticMQ (org.elasticmq:elasticmq-server_2.13 from Maven Central, in-memory, a JVM process) keeps
messages in memory; casque serve writes every send to the Cassandra node at LOCAL_QUORUM. ``--rounds``
rounds (3) of both, each server a fresh process, the first of each pair switching: the table gives each
server's medians and the rounds' ratios (the box is shared and noisy: the ratio of one round, run in the
same minutes, is the figure to quote). Results: bench/out/sqs/sqs.json. Then the table "CQL requests
per SQS call" (bench/sqs_requests.py), unless --no-requests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import boto3
from aiobotocore.session import get_session
from botocore.config import Config

from .env import KEYSPACE, ROOT, cpu_seconds, out_dir, progress, saved_results

EMQ_HOME = Path.home() / ".cache" / "casque" / "elasticmq"
EMQ_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>casque.bench</groupId><artifactId>elasticmq-fetch</artifactId><version>1</version><packaging>pom</packaging>
<dependencies><dependency><groupId>org.elasticmq</groupId><artifactId>elasticmq-server_2.13</artifactId><version>{v}</version></dependency></dependencies>
</project>"""
EMQ_VERSION = "1.7.1"
CREDS = {"region_name": "us-east-1", "aws_access_key_id": "bench", "aws_secret_access_key": "bench"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen[Any], what: str, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"bench: {what} exited ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"bench: {what} did not listen on {port} within {timeout}s")


@contextmanager
def elasticmq(pids: list[int] | None = None) -> Iterator[str]:
    """An ElasticMQ server on a free port; its URL (and its pid appended to ``pids``, to read its CPU time)."""
    lib = EMQ_HOME / EMQ_VERSION / "lib"
    if not list(lib.glob("elasticmq-server_*.jar")):
        progress(f"fetching ElasticMQ {EMQ_VERSION} and its dependencies from Maven Central")
        lib.parent.mkdir(parents=True, exist_ok=True)
        (lib.parent / "pom.xml").write_text(EMQ_POM.format(v=EMQ_VERSION))
        subprocess.run(
            ["mvn", "-q", "-B", "dependency:copy-dependencies", f"-DoutputDirectory={lib}"], cwd=lib.parent, check=True
        )
    port = free_port()
    conf = lib.parent / "bench.conf"
    conf.write_text(
        'include classpath("application.conf")\n'
        f'node-address {{ protocol = http, host = "127.0.0.1", port = {port}, context-path = "" }}\n'
        f'rest-sqs {{ enabled = true, bind-port = {port}, bind-hostname = "127.0.0.1", sqs-limits = strict }}\n'
        "rest-stats { enabled = false }\n"
    )
    with open(out_dir("sqs") / "elasticmq.log", "wb") as log:
        proc = subprocess.Popen(
            [shutil.which("java") or "java", f"-Dconfig.file={conf}", "-cp", f"{lib}/*", "org.elasticmq.server.Main"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_port(port, proc, "ElasticMQ")
            progress(f"ElasticMQ {EMQ_VERSION} on 127.0.0.1:{port} (pid {proc.pid})")
            if pids is not None:
                pids.append(proc.pid)
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(30)


@contextmanager
def casque_serve(
    pids: list[int] | None = None,
    launcher: tuple[str, ...] = ("-m", "daemon.cli"),
    keyspace: str = KEYSPACE,
    root: Path = ROOT,
    args: tuple[str, ...] = (),
) -> Iterator[str]:
    """A ``casque serve`` on the bench keyspace (or ``keyspace``), with ``args`` after ``serve``; its URL.

    Its pid is appended to ``pids``, to read its CPU time or profile it. ``launcher``: what runs
    ``serve ...`` (a wrapper such as bench/sqs_cql_serve.py). ``root``: the checkout whose code serves (another
    worktree's, for an A/B in one run).
    """
    env = dict(os.environ, CASQUE_CASSANDRA__KEYSPACE=keyspace, CASQUE_LOG__LEVEL="warning")
    subprocess.run(
        [sys.executable, "-m", "daemon.cli", "schema", "apply"], cwd=root, env=env, check=True, capture_output=True
    )
    proc = subprocess.Popen(
        [sys.executable, *launcher, "serve", "--port", "0", *args],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("casque: listening on "):
        proc.kill()
        raise SystemExit(f"bench: casque serve did not start: {line!r}")
    url = line.split()[-1]
    progress(f"casque serve on {url} (pid {proc.pid}, keyspace {keyspace}, code {root})")
    if pids is not None:
        pids.append(proc.pid)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


async def throughput(url: str, n: int, concurrency: int, pids: list[int]) -> dict[str, float]:
    """msgs/s of each phase, and the server's CPU per message in it (``pids``: the server's process)."""
    cfg = Config(max_pool_connections=concurrency * 2, retries={"total_max_attempts": 1})
    async with get_session().create_client("sqs", endpoint_url=url, config=cfg, **CREDS) as c:
        q = (await c.create_queue(QueueName=f"bench-{uuid.uuid4().hex[:8]}"))["QueueUrl"]
        # a server that has run for a while has looked at every row of its queues once (casque
        # reads each row's cursor on its first visit: buckets x shards reads); so does this one
        await c.receive_message(QueueUrl=q, WaitTimeSeconds=0)
        per = n // concurrency // 10

        async def sender(w: int) -> list[str]:
            ids = []
            for b in range(per):
                r = await c.send_message_batch(
                    QueueUrl=q, Entries=[{"Id": str(i), "MessageBody": f"{w}-{b}-{i}"} for i in range(10)]
                )
                ids += [e["MessageId"] for e in r["Successful"]]
            return ids

        t0, c0 = time.perf_counter(), cpu_seconds(pids)
        sent = [i for ids in await asyncio.gather(*(sender(w) for w in range(concurrency))) for i in ids]
        send_s, send_cpu = time.perf_counter() - t0, cpu_seconds(pids) - c0
        got: list[str] = []

        async def receiver() -> None:
            idle = 0
            while len(got) < len(sent) and idle < 5:
                r = await c.receive_message(
                    QueueUrl=q, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=120
                )
                msgs = r.get("Messages", [])
                idle = 0 if msgs else idle + 1
                if msgs:
                    got.extend(m["MessageId"] for m in msgs)
                    await c.delete_message_batch(
                        QueueUrl=q,
                        Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)],
                    )

        t0, c0 = time.perf_counter(), cpu_seconds(pids)
        await asyncio.gather(*(receiver() for _ in range(concurrency)))
        recv_s, recv_cpu = time.perf_counter() - t0, cpu_seconds(pids) - c0
        await c.delete_queue(QueueUrl=q)
    return {
        "sent": len(sent),
        "send_per_s": round(len(sent) / send_s, 1),
        "received": len(got),
        "lost": len(set(sent) - set(got)),
        "duplicates": len(got) - len(set(got)),
        "receive_delete_per_s": round(len(got) / recv_s, 1),
        "send_cpu_ms_per_msg": round(send_cpu / max(len(sent), 1) * 1000, 3),
        "receive_delete_cpu_ms_per_msg": round(recv_cpu / max(len(got), 1) * 1000, 3),
    }


def latency(url: str, count: int) -> dict[str, float]:
    cfg = Config(read_timeout=40, retries={"total_max_attempts": 1})
    sender = boto3.client("sqs", endpoint_url=url, config=cfg, **CREDS)
    q = sender.create_queue(QueueName=f"bench-lat-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    receiver = boto3.client("sqs", endpoint_url=url, config=cfg, **CREDS)
    receiver.receive_message(QueueUrl=q, WaitTimeSeconds=0)  # warm: connections, the first visit of every row
    sent_at: dict[str, float] = {}
    lat: list[float] = []
    done = threading.Event()

    def poll() -> None:
        while len(lat) < count:
            for m in receiver.receive_message(QueueUrl=q, WaitTimeSeconds=20, MaxNumberOfMessages=10).get(
                "Messages", []
            ):
                lat.append(time.perf_counter() - sent_at[m["Body"]])
                receiver.delete_message(QueueUrl=q, ReceiptHandle=m["ReceiptHandle"])
        done.set()

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    for i in range(count):
        time.sleep(0.3)  # pacing: one message at a time reaches a parked poll
        sent_at[str(i)] = time.perf_counter()
        sender.send_message(QueueUrl=q, MessageBody=str(i))
    done.wait(60)
    sender.delete_queue(QueueUrl=q)
    ms = sorted(x * 1000 for x in lat)
    return {
        "messages": len(ms),
        "p50_ms": round(statistics.median(ms), 1),
        "p95_ms": round(ms[int(len(ms) * 0.95) - 1], 1),
        "max_ms": round(ms[-1], 1),
    }


CASQUE = "casque serve"
EMQ = f"ElasticMQ {EMQ_VERSION} (in memory)"
SERVERS = {CASQUE: casque_serve, EMQ: elasticmq}


def median_of(rounds: list[dict[str, Any]], part: str, key: str) -> float:
    return round(statistics.median(r[part][key] for r in rounds), 3)


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    """One row per server: the median of its rounds (each round a fresh server process)."""
    rows = [
        "| server | send msgs/s (batches of 10) | receive+delete msgs/s | server CPU ms per message: send / "
        "receive+delete | lost / dup | long-poll send->receive p50 / p95 / max (ms) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, rounds in results.items():
        m = partial(median_of, rounds)
        lost = sum(r["throughput"]["lost"] for r in rounds)
        dup = sum(r["throughput"]["duplicates"] for r in rounds)
        rows.append(
            f"| {name} | {m('throughput', 'send_per_s'):,.0f} | {m('throughput', 'receive_delete_per_s'):,.0f} | "
            f"{m('throughput', 'send_cpu_ms_per_msg')} / {m('throughput', 'receive_delete_cpu_ms_per_msg')} | "
            f"{lost} / {dup} | {m('latency', 'p50_ms')} / {m('latency', 'p95_ms')} / {m('latency', 'max_ms')} |"
        )
    return "\n".join(rows)


def ratios(results: dict[str, list[dict[str, Any]]]) -> str:
    """Round by round, casque beside ElasticMQ run in the same minutes: the ratios to quote on a shared box."""
    rows = [
        "| round | first | receive+delete msgs/s: casque / ElasticMQ (ratio) | long-poll p50 ms: casque / ElasticMQ |",
        "| --- | --- | --- | --- |",
    ]
    per: list[float] = []
    for i, (c, e) in enumerate(zip(results[CASQUE], results[EMQ])):
        rc, re_ = c["throughput"]["receive_delete_per_s"], e["throughput"]["receive_delete_per_s"]
        per.append(rc / re_)
        rows.append(
            f"| {i + 1} | {c['first']} | {rc:,.0f} / {re_:,.0f} ({rc / re_:.2f}x) | "
            f"{c['latency']['p50_ms']} / {e['latency']['p50_ms']} |"
        )
    lat = median_of(results[CASQUE], "latency", "p50_ms")
    rows.append("")
    rows.append(
        f"receive+delete: casque / ElasticMQ median {statistics.median(per):.2f}x (target >= 1.00x: "
        f"{'met' if statistics.median(per) >= 1 else 'missed'}); long-poll send->receive p50 median {lat} ms "
        f"(target <= 15 ms: {'met' if lat <= 15 else 'missed'})"
    )
    return "\n".join(rows)


def one(name: str, args: argparse.Namespace, first: str) -> dict[str, Any]:
    """One round of one server: a fresh process, throughput then long-poll latency."""
    pids: list[int] = []
    with SERVERS[name](pids) as url:
        progress(f"{name}: throughput, {args.messages} messages, {args.concurrency} tasks")
        tp = asyncio.run(throughput(url, args.messages, args.concurrency, pids))
        progress(f"{name}: long-poll latency, {args.latency_messages} messages")
        result = {"throughput": tp, "latency": latency(url, args.latency_messages), "first": first}
    progress(f"{name}: {result}")
    return result


SQS_BEGIN, SQS_END = "<!-- sqs:begin -->", "<!-- sqs:end -->"


def section(results: dict[str, list[dict[str, Any]]], args: dict[str, Any], requests: str, at: str) -> str:
    """The section of docs/benchmarks.md this part rewrites between its markers."""
    return "\n\n".join(
        [
            "## 7. The SQS endpoint vs ElasticMQ (`python -m bench --only sqs`, or `python -m bench.sqs`)",
            f"Written by the run of {at}: {args['rounds']} rounds, "
            "each a fresh process of each server, the first of the pair switching (the ratio within a round is "
            f"the figure to quote on a shared box). {args['messages']:,} messages sent with SendMessageBatch (10 per "
            f"call) by {args['concurrency']} aiobotocore tasks, then received (10 per call, long poll 1 s) and "
            f"deleted with DeleteMessageBatch by as many (a ledger counts lost and duplicated messages); long-poll "
            f"latency: {args['latency_messages']} single messages sent (boto3) to a boto3 client parked in "
            "ReceiveMessage (WaitTimeSeconds 20). ElasticMQ keeps messages in memory; casque writes each send to "
            "Cassandra at LOCAL_QUORUM. Targets: receive+delete >= ElasticMQ's, long-poll p50 <= 15 ms.",
            table(results),
            ratios(results),
            "![receive+delete and long-poll latency per round](./bench-sqs.png)",
            requests.strip(),
        ]
    )


def part(rounds: int, to_docs: bool, report_only: bool = False, quick: bool = False) -> int:
    """The part as ``python -m bench --only sqs`` runs it: measure (unless report_only), save, plot, write the
    section (docs/benchmarks.md between its markers, or bench/out/report-sqs.md). 1 if a message was lost."""
    from . import plots
    from .report.markdown import _write_section

    path = out_dir("sqs") / "sqs.json"
    if report_only:
        loaded = saved_results(path, "sqs")
        if loaded is None:
            return 0
        saved = loaded
    else:
        argv = ["--rounds", str(rounds), "--no-requests"] + (["--messages", "2000"] if quick else [])
        main(argv)
        saved = json.loads(path.read_text())
        saved["requests"] = subprocess.run(
            [sys.executable, "-m", "bench.sqs_requests"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout
        path.write_text(json.dumps(saved, indent=2))
    results = saved["results"]
    plot = plots.sqs_rounds(results, out_dir() / "bench-sqs.png")
    body = section(results, saved["args"], saved.get("requests", ""), saved.get("at", "(time not saved)"))
    target = _write_section(body, "report-sqs.md", plot, SQS_BEGIN, SQS_END, to_docs, before="<!-- sqs-fifo:begin -->")
    progress(f"sqs: results {path}, report {target}")
    unclean = [r for rs in results.values() for r in rs if r["throughput"]["lost"] or r["throughput"]["duplicates"]]
    return 1 if unclean else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.sqs")
    p.add_argument("--messages", type=int, default=4000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--latency-messages", type=int, default=40)
    p.add_argument("--rounds", type=int, default=3, help="rounds of both servers, the first of the pair switching")
    p.add_argument("--no-requests", action="store_true", help="skip the CQL requests per SQS call table")
    args = p.parse_args(argv)
    results: dict[str, list[dict[str, Any]]] = {CASQUE: [], EMQ: []}
    for r in range(args.rounds):
        order = [CASQUE, EMQ] if r % 2 == 0 else [EMQ, CASQUE]
        progress(f"round {r + 1} of {args.rounds}: {order[0]} first")
        for name in order:
            results[name].append(one(name, args, order[0].split()[0]))
    at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    (out_dir("sqs") / "sqs.json").write_text(json.dumps({"args": vars(args), "at": at, "results": results}, indent=2))
    print(table(results))
    print()
    print(ratios(results))
    if not args.no_requests:  # the server's CQL per call (bench/sqs_requests.py, its own process)
        subprocess.run([sys.executable, "-m", "bench.sqs_requests"], cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
