"""CQL requests per SQS call, counted in a real ``casque serve``: ``python -m bench.sqs_requests``.

The server runs under bench/sqs_cql_serve.py, which charges every CQL request to the SQS call that
caused it (by the request id the answer carries). One boto3 client drives, one call at a time, on
a standard and a FIFO queue made by CreateQueue (the defaults an SQS user gets):
  * SendMessageBatch of 10;
  * ReceiveMessage (MaxNumberOfMessages 10) that returns messages, each after a pause (the counting of the call
    before it), then by one client receiving in a loop (receive, delete, receive), then by 8 at once;
  * DeleteMessageBatch of the 10 receipts it returned;
  * an empty ReceiveMessage with WaitTimeSeconds: the requests before it parks (its first look) and
    those while it waits (any that come after a pause of a second or more), right after the queue was
    drained, and again (WaitTimeSeconds 2, ``--rounds`` times) once that first one returned: a look right
    after takes reads from past what they took, and from the cursors when that found nothing
    (engine/delivery/idle_look.py).
Each figure is the median over ``--rounds`` calls (and the mean, which the rare cache refresh and
the at-most-every-15-s marks raise). The table goes to bench/out/sqs_requests.json and stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from .sqs import casque_serve

CREDS = {"region_name": "us-east-1", "aws_access_key_id": "bench", "aws_secret_access_key": "bench"}
#: A request after a pause this long in a call is one made while the poll waited (a parked poll makes none).
PARKED_GAP_MS = 1000.0


class CallLog:
    """The counting server's file: the CQL requests of a call, found by its request id."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def requests(self, request_id: str, answered_at: float, settle_s: float = 0.2) -> list[list[Any]]:
        """[offset ms, statement] of every CQL request the call caused, as written after
        ``answered_at`` + ``settle_s`` (tasks the call started, such as a mark, may end just after it)."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                data = json.loads(self.path.read_text())
            except (FileNotFoundError, ValueError):
                data = {"t": 0}
            if data["t"] > answered_at + settle_s:
                call = data["data"]["calls"].get(request_id)
                return list(call["requests"]) if call else []
            time.sleep(0.02)
        raise RuntimeError(f"the counting server wrote nothing after {answered_at} to {self.path}")

    def call(self, fn: Any, **kwargs: Any) -> tuple[dict[str, Any], list[list[Any]]]:
        """Make one SQS call; its answer and the CQL requests it cost."""
        out = fn(**kwargs)
        return out, self.requests(out["ResponseMetadata"]["RequestId"], time.time())


def parked_split(requests: list[list[Any]]) -> tuple[int, int]:
    """(before it parks, while it waits): requests after the first pause of PARKED_GAP_MS or more
    are the waiting poll's own (the first look is a chain of requests with no pause)."""
    last = 0.0
    for i, (offset, _) in enumerate(requests):
        if offset - last >= PARKED_GAP_MS:
            return i, len(requests) - i
        last = offset
    return len(requests), 0


def client(url: str) -> Any:
    return boto3.client("sqs", endpoint_url=url, config=Config(read_timeout=60, retries={"max_attempts": 1}), **CREDS)


def measure_queue(log: CallLog, url: str, fifo: bool, rounds: int, wait_s: int) -> dict[str, Any]:
    """The CQL requests of each kind of call on a new queue (standard or FIFO), ``rounds`` of each."""
    sqs = client(url)
    name = f"reqs-{uuid.uuid4().hex[:8]}" + (".fifo" if fifo else "")
    attrs = {"FifoQueue": "true"} if fifo else {}
    q = sqs.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"]
    sqs.receive_message(QueueUrl=q, WaitTimeSeconds=0)  # a server serving a queue has looked at its rows once
    calls: dict[str, list[list[list[Any]]]] = {
        "send": [],
        "receive": [],
        "delete": [],
        "long_poll": [],
        "long_poll_again": [],
    }
    n = 0
    for _ in range(rounds):
        entries = []
        for i in range(10):
            e: dict[str, Any] = {"Id": str(i), "MessageBody": f"m{n}"}
            if fifo:
                e |= {"MessageGroupId": f"g{n % 10}", "MessageDeduplicationId": f"d{n}"}
            entries.append(e)
            n += 1
        _, reqs = log.call(sqs.send_message_batch, QueueUrl=q, Entries=entries)
        calls["send"].append(reqs)
    got = 0
    while got < 10 * rounds:
        out, reqs = log.call(
            sqs.receive_message, QueueUrl=q, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=120
        )
        msgs = out.get("Messages", [])
        if not msgs:
            continue
        got += len(msgs)
        calls["receive"].append(reqs)
        entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)]
        dout, dreqs = log.call(sqs.delete_message_batch, QueueUrl=q, Entries=entries)
        if dout.get("Failed"):
            raise RuntimeError(f"a delete failed: {dout['Failed']}")
        if len(msgs) == 10:
            calls["delete"].append(dreqs)
    out, reqs = log.call(sqs.receive_message, QueueUrl=q, MaxNumberOfMessages=10, WaitTimeSeconds=wait_s)
    if out.get("Messages"):
        raise RuntimeError("the queue was not empty for the long poll")
    calls["long_poll"].append(reqs)
    for _ in range(rounds):  # the polls that follow: a median, and the periodic reads (settings, cursors) in the mean
        out, reqs = log.call(sqs.receive_message, QueueUrl=q, MaxNumberOfMessages=10, WaitTimeSeconds=2)
        if out.get("Messages"):
            raise RuntimeError("the queue was not empty for a later long poll")
        calls["long_poll_again"].append(reqs)
    if not fifo:
        calls["receive_loop"] = concurrent_receives(log, url, q, 10 * rounds, receivers=1)
        calls["receive_concurrent"] = concurrent_receives(log, url, q, 10 * rounds * 4)
    sqs.delete_queue(QueueUrl=q)
    return summarize(calls)


def concurrent_receives(log: CallLog, url: str, q: str, n: int, receivers: int = 8) -> list[list[list[Any]]]:
    """The CQL of each ReceiveMessage that returned messages while ``receivers`` clients received and
    deleted ``n`` messages from the queue at once: what contention on the queue's rows adds to a receive."""
    sqs = client(url)
    for b in range(n // 10):
        sqs.send_message_batch(QueueUrl=q, Entries=[{"Id": str(i), "MessageBody": f"c{b}-{i}"} for i in range(10)])
    answered: list[str] = []
    lock = threading.Lock()

    def receive() -> None:
        c, idle = client(url), 0
        while idle < 3:
            with lock:
                if len(answered) * 10 >= n:
                    return
            out = c.receive_message(QueueUrl=q, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=120)
            msgs = out.get("Messages", [])
            idle = 0 if msgs else idle + 1
            if msgs:
                with lock:
                    answered.append(out["ResponseMetadata"]["RequestId"])
                entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)]
                c.delete_message_batch(QueueUrl=q, Entries=entries)

    threads = [threading.Thread(target=receive) for _ in range(receivers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.requests("", time.time())  # waits until the server's file was written after the last call
    data = json.loads(log.path.read_text())["data"]["calls"]
    return [list(data[r]["requests"]) if r in data else [] for r in answered]


def summarize(calls: dict[str, list[list[list[Any]]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, per_call in calls.items():
        counts = [len(r) for r in per_call]
        if not counts:
            continue
        row: dict[str, Any] = {
            "calls": len(counts),
            "median": statistics.median(counts),
            "mean": round(statistics.fmean(counts), 2),
            "max": max(counts),
            "example": per_call[len(per_call) // 2],
        }
        if kind.startswith("long_poll"):
            splits = [parked_split(r) for r in per_call]
            before = [b for b, _ in splits]
            row["before_park"] = statistics.median(before)
            row["before_park_mean"] = round(statistics.fmean(before), 2)
            row["before_park_max"] = max(before)
            row["while_waiting"] = max(w for _, w in splits)
        out[kind] = row
    return out


def table(results: dict[str, dict[str, Any]]) -> str:
    names = {
        "receive": "ReceiveMessage (10) that returned messages",
        "receive_loop": "the same, one client receiving in a loop: receive, delete, receive (standard)",
        "receive_concurrent": "the same, 8 clients receiving from one queue at once (standard)",
        "long_poll": "empty ReceiveMessage with WaitTimeSeconds right after a drain: before it parks / while it waits",
        "long_poll_again": "the empty ReceiveMessages after it (WaitTimeSeconds 2): before it parks / while it waits",
        "delete": "DeleteMessageBatch of 10",
        "send": "SendMessageBatch of 10",
    }
    heads = list(results)
    rows = ["| SQS call | " + " | ".join(heads) + " |", "| --- |" + " --- |" * len(heads)]
    for kind, label in names.items():
        cells = []
        for r in results.values():
            x = r.get(kind)
            if x is None:
                cells.append("-")
            elif kind.startswith("long_poll") and x["calls"] > 1:
                cells.append(
                    f"{x['before_park']:g} (mean {x['before_park_mean']:g}, max {x['before_park_max']}) / "
                    f"{x['while_waiting']}"
                )
            elif kind.startswith("long_poll"):
                cells.append(f"{x['before_park']:g} / {x['while_waiting']}")
            else:
                cells.append(f"{x['median']:g} (mean {x['mean']:g}, max {x['max']})")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    from .env import out_dir, progress

    p = argparse.ArgumentParser(prog="python -m bench.sqs_requests")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--wait", type=int, default=20, help="WaitTimeSeconds of the empty long poll")
    args = p.parse_args(argv)
    calls_file = out_dir("sqs") / "sqs_requests_calls.json"
    results: dict[str, dict[str, Any]] = {}
    with casque_serve(launcher=("-m", "bench.sqs_cql_serve", str(calls_file))) as url:
        log = CallLog(calls_file)
        for label, fifo in (("standard queue", False), ("FIFO queue", True)):
            progress(f"CQL requests per SQS call: {label}, {args.rounds} rounds")
            results[label] = measure_queue(log, url, fifo, args.rounds, args.wait)
    (out_dir("sqs") / "sqs_requests.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    print("CQL requests per SQS call (median over the calls; counted in the server by bench/sqs_cql_serve.py)")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
