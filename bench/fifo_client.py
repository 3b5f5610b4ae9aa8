"""The FIFO benchmark's client side (bench/sqs_fifo.py): the tally of what one run saw, the call that
retries a transport error with the same parameters, and the senders and receivers of one queue.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from .fifo_ledger import Delivery, Ledger, body_of, check
from .fifo_plan import TRANSPORT_RETRIES, VISIBILITY_S, WAIT_S, Scenario, Size


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
