"""The ledger of a FIFO run over SQS: what producers sent, what receivers saw and what they deleted,
and the counts a FIFO queue promises (order per group, nothing lost, nothing processed twice, one
message per deduplication id).

Every record is written by the client thread that saw it, under one lock. "Seen" is ordered by the
monotonic time the receive's answer arrived (then its place in the answer): a group's next message
can only be taken after its previous one was deleted, which happens after that answer arrived, so
within a group this order is the order the queue delivered in, across threads and servers.

A group's messages whose visibility ran out before they were deleted come back, from the first of them,
in order (SQS's FIFO): so a group's deliveries are runs of consecutive numbers, each new message the one
after the highest delivered, and a run that goes back starts where the group's deletes ended: every
message before it deleted (by the time that answer arrived), none of its own deleted before that
receive began.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from .sqs_clients import Key, Seen


@dataclass
class Outcome:
    sent: int = 0
    processed: int = 0
    lost: int = 0
    processed_twice: int = 0
    ids_per_dedup_over_one: int = 0  # a dedup id answered or delivered under two message ids
    groups_out_of_order: int = 0
    sequence_out_of_order: int = 0  # a group's SequenceNumbers not increasing in send order
    redelivered: int = 0  # receives of a message already received (its visibility timeout passed)
    first_seen_redelivered: int = 0  # first seen with ApproximateReceiveCount > 1: its first answer never arrived
    send_errors: int = 0
    sends_retried: int = 0
    retries_placed_by_first_attempt: int = 0  # a retried entry answered with the failed attempt's position
    receive_errors: int = 0
    delete_errors: int = 0
    deletes_refused: int = 0  # refused as expired: the visibility ended before the delete came
    deleted_unanswered: int = 0  # refused after an attempt that went unanswered, never seen again: that one landed
    leftover: int = 0  # messages still in the queue once every sent message was processed
    seconds: float = 0.0
    examples: list[str] = field(default_factory=list)

    def line(self) -> str:
        skip = {"examples"}
        body = " ".join(
            f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in vars(self).items() if k not in skip
        )
        return body + (f" examples={self.examples[:5]}" if self.examples else "")


class Ledger:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: dict[Key, set[str]] = defaultdict(set)  # message ids the send answers gave
        self.sequences: dict[Key, str] = {}
        self.seen: list[Seen] = []
        self.processed: list[tuple[Key, str]] = []
        self.deleted_at: dict[Key, float] = {}  # when a message's first successful delete answered (monotonic)
        self.maybe_deleted: set[Key] = set()  # a delete refused after an attempt that went unanswered
        self.outcome = Outcome()
        self.retries: list[tuple[Key, int]] = []

    def record_sent(self, key: Key, message_id: str, sequence: str, retried_at_ms: int | None) -> None:
        """``retried_at_ms``: the wall time (ms) the retry that got this answer began, or None for a
        first attempt. A FIFO position is max(now, tail + 1) at the send that placed it (its
        sequence's first 13 digits): one before the retry began was placed by the failed attempt,
        so the retry was answered as a duplicate."""
        with self.lock:
            self.sent[key].add(message_id)
            self.sequences.setdefault(key, sequence)
            if retried_at_ms is not None:
                self.outcome.sends_retried += 1
                self.outcome.retries_placed_by_first_attempt += int(sequence[:13]) < retried_at_ms
                self.retries.append((key, int(sequence[:13]) - retried_at_ms))

    def record_seen(self, items: list[Seen]) -> None:
        with self.lock:
            self.seen += items

    def record_processed(self, delivery: Seen, at: float = 0.0) -> None:
        """``delivery``'s delete succeeded; its answer arrived at ``at`` (monotonic)."""
        with self.lock:
            self.processed.append((delivery.key, delivery.message_id))
            self.deleted_at.setdefault(delivery.key, at)

    def record_refused(self, delivery: Seen, unanswered_before: bool) -> None:
        """``delivery``'s delete was refused as expired: its visibility ended first, so the message comes back. Unless
        ``unanswered_before``: an earlier attempt of that delete failed at the server, and a write that timed out may
        still land after the retry's read: then the message is gone, deleted by its receiver's request."""
        with self.lock:
            self.outcome.deletes_refused += 1
            if unanswered_before:
                self.maybe_deleted.add(delivery.key)

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            setattr(self.outcome, name, getattr(self.outcome, name) + n)

    def seen_ids(self) -> set[str]:
        with self.lock:
            return {s.message_id for s in self.seen}

    def first_delivery_ids(self) -> set[str]:
        """The ids seen in an answer to their first delivery (ApproximateReceiveCount 1)."""
        with self.lock:
            return {s.message_id for s in self.seen if s.receive_count == 1}

    def processed_keys(self) -> set[Key]:
        """The keys whose delete succeeded, or may have (``record_refused``): one that did not comes back and is
        processed, or is left in the queue for the drain (``tally``)."""
        with self.lock:
            return {k for k, _ in self.processed} | self.maybe_deleted

    def tally(self, left: list[Key], seconds: float) -> Outcome:
        """The counts, from the records and ``left``, what the queue held once every message was processed. A message
        whose delete may have landed (``record_refused``) and was not deleted since is lost neither if it did (it was
        never seen again) nor if it did not (it is in ``left``, and no leftover)."""
        out = self.outcome
        done = Counter(k for k, _ in self.processed)
        undecided = self.maybe_deleted - set(done)
        out.leftover, out.seconds = sum(k not in undecided for k in left), seconds
        out.deleted_unanswered = len(undecided - set(left))
        out.sent = len(self.sent)
        out.processed = len(done)
        out.lost = len(set(self.sent) - set(done) - undecided)
        out.processed_twice = sum(n - 1 for n in done.values())
        ids: dict[Key, set[str]] = defaultdict(set)
        for k, v in self.sent.items():
            ids[k] |= v
        for s in self.seen:
            ids[s.key].add(s.message_id)
        for k, mid in self.processed:
            ids[k].add(mid)
        out.ids_per_dedup_over_one = sum(1 for v in ids.values() if len(v) > 1)
        self._order(out)
        return out

    def _order(self, out: Outcome) -> None:
        """Per group, in delivery order: runs of consecutive numbers (the module docstring), each new
        number the one after the highest delivered; a run that goes back starts right after a deleted
        message and redelivers none deleted before its receive began. And the SequenceNumbers increase
        with the numbers."""
        per_group: dict[str, list[Seen]] = defaultdict(list)
        for s in sorted(self.seen, key=lambda s: (s.at, s.index)):
            per_group[s.key[0]].append(s)
        received: set[str] = set()
        never = float("inf")
        for group, seen in per_group.items():
            folded: list[int] = []
            top, broken = -1, None
            for s in seen:
                if s.message_id in received:
                    out.redelivered += 1
                else:
                    received.add(s.message_id)
                    out.first_seen_redelivered += s.receive_count > 1
                n = s.key[1]
                gone = self.deleted_at.get(s.key, never) < s.began  # came back once deleted
                repeat = bool(folded) and folded[-1] == n  # the same message again at once: one delivery repeated
                back = n <= top and not repeat and (not folded or n != folded[-1] + 1)  # a run that goes back
                if (
                    gone
                    or n > top + 1
                    or ((back or repeat) and n > 0 and self.deleted_at.get((group, n - 1), never) > s.at)
                ):
                    broken = len(folded) if broken is None else broken
                if not repeat:
                    folded.append(n)
                top = max(top, n)
            if broken is not None:
                out.groups_out_of_order += 1
                at = broken
                out.examples.append(f"{group} from #{max(0, at - 3)}: {folded[max(0, at - 3) : at + 9]}")
            folded = list(range(top + 1))
            seqs = [self.sequences.get((group, n)) for n in range(len(folded))]
            if any(a is None or b is None or a >= b for a, b in zip(seqs, seqs[1:])):
                out.sequence_out_of_order += 1
