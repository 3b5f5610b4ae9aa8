"""boto3 producers and receivers of one SQS queue over several ``casque serve`` processes, written as
an SDK user writes them: a request that fails (connection refused or cut, a 5xx) is retried on the
other server, a send with the same entries (a FIFO queue's with the same MessageDeduplicationId), a
delete with the same receipt handles. What each one sent, saw and deleted goes to a ledger (``Records``:
daemon/testing/fifo_ledger.py for a FIFO queue, daemon/testing/standard_ledger.py for a standard one).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ConnectionClosedError, EndpointConnectionError

Key = tuple[str, int]  # (group, or producer; its message number in send order): what a message's body says


@dataclass
class Seen:
    """One delivery, as a receive's answer gave it."""

    at: float  # monotonic time the receive's answer arrived
    index: int  # place in that answer
    key: Key
    message_id: str
    receive_count: int  # ApproximateReceiveCount: which delivery of the message this is
    sequence: str  # SequenceNumber (FIFO), else ""
    began: float = 0.0  # monotonic time the receive began (its first attempt)


class Records(Protocol):
    """What the clients write to a ledger, each record by the thread that saw it."""

    def record_sent(self, key: Key, message_id: str, sequence: str, retried_at_ms: int | None) -> None: ...

    def record_seen(self, items: list[Seen]) -> None: ...

    def record_processed(self, delivery: Seen, at: float) -> None: ...

    def record_refused(self, delivery: Seen, unanswered_before: bool) -> None: ...

    def count(self, name: str, n: int = 1) -> None: ...


class DrainRecords(Protocol):
    """What ``drain`` writes to a ledger that keeps what it finds apart from what the receivers saw."""

    def record_drained(self, items: list[Seen]) -> None: ...

    def record_processed(self, delivery: Seen, at: float) -> None: ...


RETRY_FOR_S = 300.0  # how long one request is retried over the servers before the thread gives up
#: Above the longest poll plus a frozen node, and above the longest time the kill test holds the
#: victim's answers back before the kill cuts them (its three waits of at most 60 s each): at 30 s,
#: a full suite's run on 2 busy cores saw a send held by the gate time out before the kill came.
READ_TIMEOUT_S = 200


def client(url: str) -> Any:
    """One attempt per call (the thread retries, on the other server). ``total_max_attempts``, not
    ``max_attempts``: botocore's ``max_attempts`` counts retries after the first, so 1 let botocore
    send a failed request once more to the same server, unseen by the ledger: each send to a frozen
    node's server wrote a standard queue's entries three times, not twice (seen by
    tests/test_sqs_standard_faults.py)."""
    cfg = Config(retries={"total_max_attempts": 1}, read_timeout=READ_TIMEOUT_S, connect_timeout=5)
    return boto3.client(
        "sqs", endpoint_url=url, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s", config=cfg
    )


def server_fault(exc: BaseException) -> bool:
    """What a user retries: no answer at all, or the server's own fault (5xx). A 4xx is ours."""
    if isinstance(exc, BotoCoreError):
        return True
    return isinstance(exc, ClientError) and exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 500) >= 500


class Endpoints:
    """The servers in the order one thread prefers them, each with its own queue URL."""

    def __init__(self, urls: list[str], path: str, first: int) -> None:
        order = urls[first:] + urls[:first]
        self.urls = order
        self.clients = [client(u) for u in order]
        self.queue_urls = [u + path for u in order]
        self.current = 0
        self.down: set[int] = set()  # servers that refused or cut a connection: not tried again
        self.retried_at_ms: int | None = None  # the last call: wall time its answered attempt began, if not the first
        self.outstanding: tuple[str, float] | None = None  # the server a request is waiting on, since (monotonic)

    def call(self, op: str, ledger: Records, error_count: str, **kw: Any) -> dict[str, Any]:
        """``op`` on the current server; on a server fault, on the next one, until RETRY_FOR_S."""
        deadline = time.monotonic() + RETRY_FOR_S
        self.retried_at_ms = None
        while True:
            try:
                self.outstanding = (self.urls[self.current], time.monotonic())
                return getattr(self.clients[self.current], op)(QueueUrl=self.queue_urls[self.current], **kw)
            except (BotoCoreError, ClientError) as exc:
                if not server_fault(exc) or time.monotonic() > deadline:
                    raise
                ledger.count(error_count)
                if isinstance(exc, (EndpointConnectionError, ConnectionClosedError)) and len(self.down) + 1 < len(
                    self.clients
                ):
                    self.down.add(self.current)  # refused or cut: the process is gone (a balancer's health check)
                before = self.current
                self.next()
                if self.current <= before:
                    time.sleep(0.1)  # a backoff, as SDKs have: every server failed once, don't spin while they recover
                self.retried_at_ms = int(time.time() * 1000)
            finally:
                self.outstanding = None

    def next(self) -> None:
        """The next server not down, in turn."""
        for _ in range(len(self.clients)):
            self.current = (self.current + 1) % len(self.clients)
            if self.current not in self.down:
                return


class Producer(threading.Thread):
    """Sends messages 0..per_group-1 of its groups, in that order, in batches of 10 (distinct
    groups per batch while there are ten groups or more); each batch goes to the next server in
    turn, so a group's messages cross servers. A group's next message is sent only once its previous
    one was answered. ``fifo``: with MessageGroupId and MessageDeduplicationId; else a standard
    queue's plain sends, each body unique (a retried entry that the failed attempt had written is
    then a second message with that body, as SQS's at-least-once send gives)."""

    def __init__(
        self,
        urls: list[str],
        path: str,
        groups: list[str],
        per_group: int,
        ledger: Records,
        first: int,
        fifo: bool = True,
    ) -> None:
        super().__init__(daemon=True)
        self.ends = Endpoints(urls, path, first)
        self.todo = [(g, n) for n in range(per_group) for g in groups]
        self.ledger = ledger
        self.fifo = fifo
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for start in range(0, len(self.todo), 10):
                self._send_batch(self.todo[start : start + 10])
                self.ends.next()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _send_batch(self, batch: list[Key]) -> None:
        entries = {f"e{i}": e for i, e in enumerate(batch)}
        retried_at: int | None = None
        while entries:
            req = [
                {"Id": i, "MessageBody": json.dumps({"g": g, "n": n})}
                | ({"MessageGroupId": g, "MessageDeduplicationId": f"{g}-{n}"} if self.fifo else {})
                for i, (g, n) in entries.items()
            ]
            out = self.ends.call("send_message_batch", self.ledger, "send_errors", Entries=req)
            retried_at = retried_at or self.ends.retried_at_ms
            for ok in out.get("Successful", []):
                key = entries.pop(ok["Id"])
                self.ledger.record_sent(key, ok["MessageId"], ok.get("SequenceNumber", ""), retried_at)
            for bad in out.get("Failed", []):
                if bad.get("SenderFault"):
                    raise AssertionError(f"send refused: {bad}")
                self.ledger.count("send_errors")
                retried_at = int(time.time() * 1000)


class Receiver(threading.Thread):
    """Long-polls up to 10 messages, records them, deletes them in one DeleteMessageBatch (retried
    on the other server with the same receipts), and records each delete that succeeded, and each
    one SQS refused as expired (a FIFO receipt whose visibility ended first). A test may
    park it between one delete and the next receive (``may_receive``); it must set it again."""

    def __init__(
        self, urls: list[str], path: str, ledger: Records, first: int, stop: threading.Event, wait_s: int = 2
    ) -> None:
        super().__init__(daemon=True)
        self.ends = Endpoints(urls, path, first)
        self.ledger, self.stop, self.wait_s = ledger, stop, wait_s
        self.error: BaseException | None = None
        self.answered_began = 0.0  # when the receive last answered (and recorded) began, monotonic
        self.may_receive = threading.Event()  # cleared by a test: wait before the next receive
        self.may_receive.set()
        self.parked = threading.Event()  # set while it waits, with nothing taken and not deleted

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                if not self.may_receive.is_set():
                    self.parked.set()
                    self.may_receive.wait()
                    self.parked.clear()
                    continue
                began = time.monotonic()
                out = self.ends.call(
                    "receive_message",
                    self.ledger,
                    "receive_errors",
                    MaxNumberOfMessages=10,
                    WaitTimeSeconds=self.wait_s,
                    AttributeNames=["ApproximateReceiveCount", "SequenceNumber"],
                )
                at = time.monotonic()
                msgs = out.get("Messages", [])
                seen = [_seen(at, i, m, began) for i, m in enumerate(msgs)]
                if seen:
                    self.ledger.record_seen(seen)
                self.answered_began = began
                if seen:
                    self._delete_all(msgs, seen)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _delete_all(self, msgs: list[dict[str, Any]], seen: list[Seen]) -> None:
        pending = {str(i): (m, s) for i, (m, s) in enumerate(zip(msgs, seen, strict=True))}
        unanswered = False  # an attempt failed at the server: its deletes may still land (a timed-out write may)
        while pending:
            out = self.ends.call(
                "delete_message_batch",
                self.ledger,
                "delete_errors",
                Entries=[{"Id": i, "ReceiptHandle": m["ReceiptHandle"]} for i, (m, _) in pending.items()],
            )
            unanswered = unanswered or self.ends.retried_at_ms is not None
            answered = time.monotonic()
            for ok in out.get("Successful", []):
                self.ledger.record_processed(pending.pop(ok["Id"])[1], answered)
            for bad in out.get("Failed", []):
                self.ledger.count("delete_errors")
                if _expired(bad):  # a FIFO delete after the visibility ended: SQS refuses it, the message comes back
                    self.ledger.record_refused(pending.pop(bad["Id"])[1], unanswered)
                elif bad.get("SenderFault"):
                    raise AssertionError(f"delete refused: {bad}")
                else:
                    unanswered = True


def _expired(entry: dict[str, Any]) -> bool:
    return entry.get("Code") == "ReceiptHandleIsInvalid" and "expired" in str(entry.get("Message", ""))


def key_of(m: dict[str, Any]) -> Key:
    body = json.loads(m["Body"])
    return body["g"], int(body["n"])


def _seen(at: float, index: int, m: dict[str, Any], began: float) -> Seen:
    a = m.get("Attributes", {})
    return Seen(
        at,
        index,
        key_of(m),
        m["MessageId"],
        int(a.get("ApproximateReceiveCount", "0")),
        a.get("SequenceNumber", ""),
        began,
    )


def drain(urls: list[str], path: str, wait_s: int, ledger: DrainRecords | None = None) -> list[dict[str, Any]]:
    """What is left once every message sent was processed: long polls on each live server until one
    waits ``wait_s`` (past any visibility timeout) and answers nothing. ``ledger``: each message
    drained is recorded there, and as processed once its delete succeeded."""
    left: list[dict[str, Any]] = []
    for url in urls:
        c = client(url)
        q = url + path
        while True:
            began = time.monotonic()
            got = c.receive_message(
                QueueUrl=q, MaxNumberOfMessages=10, WaitTimeSeconds=wait_s, AttributeNames=["ApproximateReceiveCount"]
            ).get("Messages", [])
            if not got:
                break
            left += got
            seen = [_seen(time.monotonic(), i, m, began) for i, m in enumerate(got)]
            if ledger is not None:
                ledger.record_drained(seen)
            out = c.delete_message_batch(
                QueueUrl=q, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
            )
            if ledger is not None:
                answered = time.monotonic()
                for ok in out.get("Successful", []):
                    ledger.record_processed(seen[int(ok["Id"])], answered)
    return left


L = TypeVar("L", bound=Records)


@dataclass
class Clients(Generic[L]):
    """One test's client threads and the ledger they write to."""

    producers: list[Producer]
    receivers: list[Receiver]
    ledger: L

    @property
    def threads(self) -> list[Producer | Receiver]:
        return [*self.producers, *self.receivers]


def run_clients(
    c: Clients[L],
    backlog: Callable[[], bool],
    fault: Callable[[], None] | None,
    finished: Callable[[], bool],
    deadline_s: float,
) -> None:
    """Start the producers; once ``backlog()`` (enough sent that the receivers' first receives take at
    once), the receivers; then run ``fault()`` in this thread. Once every producer is done and
    ``finished()``, stop the receivers (a parked one too), join every thread and fail with the
    error of any that failed."""
    threads = c.threads
    try:
        for p in c.producers:
            p.start()
        poll(backlog, deadline_s, "the backlog sent", threads)
        for r in c.receivers:
            r.start()
        if fault is not None:
            fault()
        poll(
            lambda: not any(p.is_alive() for p in c.producers) and finished(),
            deadline_s,
            "every message sent and processed",
            threads,
        )
    finally:
        for r in c.receivers:
            r.stop.set()
            r.may_receive.set()  # a parked receiver sees ``stop`` and ends
        for t in threads:
            if t.ident is not None:  # started
                t.join(timeout=60)
    for t in threads:
        assert t.error is None, repr(t.error)


def poll(condition: Callable[[], bool], timeout: float, what: str, threads: list[Any]) -> None:
    """Wait for ``condition`` with a deadline; fail at once if a client thread died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        for t in threads:
            if t.error is not None:
                raise AssertionError(f"a client thread failed while waiting for {what}: {t.error!r}")
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
