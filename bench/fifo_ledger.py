"""The FIFO bench's ledger: what was sent, what came back, and whether it came back in order.

Pure functions over plain records (no I/O), so tests/test_bench_sqs_fifo.py checks them without a
server. Every message body names its place: ``"<sender>:<group>:<k>"``, k counting that sender's
messages to that group (its *stream*). Order is judged two ways, because neither alone is enough:

* per stream: one sender sends to a group one call after another (and entries of one batch in
  entry order), so SQS's FIFO promise is that the stream is first delivered in the order it was
  sent. The client knows that order whatever the server says.
* per group: in delivery order, the SequenceNumbers the server gave a group's messages increase.
  This covers messages of different senders in one group, whose order only the server knows.

A message delivered again is a duplicate, not an order fault (only first deliveries are judged);
a message first delivered after a later one of its stream, or with a lower SequenceNumber than one
of its group already delivered, is out of order (counted once even if it breaks both rules).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass


def body_of(sender: int, group: str, k: int) -> str:
    """The body of the k-th message ``sender`` sends to ``group``: unique, and it says where it belongs."""
    return f"{sender}:{group}:{k}"


def parse_body(body: str) -> tuple[str, str, int]:
    """(stream, group, k) of a body made by :func:`body_of`; ValueError for anything else."""
    sender, group, k = body.split(":")
    return f"{sender}:{group}", group, int(k)


@dataclass(frozen=True)
class Delivery:
    """One message as a ReceiveMessage answer gave it, in the order the answers arrived."""

    body: str
    group: str | None = None  # the MessageGroupId system attribute, if the server returned it
    sequence: str | None = None  # the SequenceNumber system attribute, if the server returned it


@dataclass
class Ledger:
    sent: int = 0  # entries the server answered as sent
    send_failed: int = 0  # entries it answered as failed (in SendMessageBatch's Failed list)
    received: int = 0  # distinct sent messages delivered at least once
    lost: int = 0  # sent, never delivered
    duplicates: int = 0  # deliveries after a message's first
    unknown: int = 0  # delivered, never sent (or not a body of this bench)
    out_of_order: int = 0  # first deliveries that break the stream order or the group's SequenceNumber order
    stream_order: int = 0  # of which: after a later message of the same sender and group
    sequence_order: int = 0  # of which: a SequenceNumber not above the group's last delivered one
    wrong_group: int = 0  # delivered with a MessageGroupId other than the one it was sent with
    without_sequence: int = 0  # first deliveries the server gave no SequenceNumber (its order not checked)
    delete_failed: int = 0  # DeleteMessageBatch entries that failed (filled in by the bench)
    retries: int = 0  # calls repeated after a transport error (filled in by the bench)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @property
    def clean(self) -> bool:
        return not (
            self.send_failed
            or self.lost
            or self.duplicates
            or self.unknown
            or self.out_of_order
            or self.wrong_group
            or self.delete_failed
        )


def check(sent: Iterable[str], deliveries: Sequence[Delivery], send_failed: int = 0) -> Ledger:
    """Compare the bodies the server accepted with the deliveries, in the order they arrived."""
    expected = set(sent)
    led = Ledger(sent=len(expected), send_failed=send_failed)
    seen: set[str] = set()
    last_k: dict[str, int] = {}
    last_seq: dict[str, int] = {}
    for d in deliveries:
        if d.body not in expected:
            led.unknown += 1
            continue
        if d.body in seen:
            led.duplicates += 1
            continue
        seen.add(d.body)
        stream, group, k = parse_body(d.body)
        if d.group is not None and d.group != group:
            led.wrong_group += 1
        bad = False
        if k <= last_k.get(stream, -1):
            led.stream_order += 1
            bad = True
        else:
            last_k[stream] = k
        if d.sequence is None:
            led.without_sequence += 1
        elif int(d.sequence) <= last_seq.get(group, -1):
            led.sequence_order += 1
            bad = True
        else:
            last_seq[group] = int(d.sequence)
        led.out_of_order += bad
    led.received = len(seen)
    led.lost = len(expected - seen)
    return led


def merge(ledgers: Iterable[Ledger]) -> Ledger:
    """The sum of several runs' ledgers (the table shows every round's faults, not the last one's)."""
    total = Ledger()
    for led in ledgers:
        for key, value in led.as_dict().items():
            setattr(total, key, getattr(total, key) + value)
    return total
