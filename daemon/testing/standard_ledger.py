"""The ledger of a standard queue's run over SQS: what producers sent, what receives were given and
what their deletes settled, and the counts a standard queue promises: at-least-once delivery (nothing
lost, nothing left over), and no delivery handed out twice.

A standard queue promises no order, and a message may come again once its visibility timeout
passed, so what is counted is by *delivery*: a message id and its ApproximateReceiveCount, which
casque counts up at each take of the message (the attempt written with its timeout column). Every
record is written by the client thread that saw it, under one lock; times are the client's
monotonic clock (the servers run on the same machine: a span of it is a span of theirs).

What each count means (``tally``):

* ``deliveries_given_twice``: a (MessageId, ApproximateReceiveCount) in two answers, or in one
  answer and in an answer the test's gate held back (``record_held``). One take's message went to
  two receives: two members of a joint take given the same share, or a take answered twice.
* ``early_redeliveries``: a message's later delivery answered before the receive of its earlier one
  had even begun plus the visibility timeout (less ``EARLY_SLACK_S``): the message was taken again
  while still in flight. The earlier take happened after that receive began, and the later one
  can't happen before the earlier's timeout passed.
* ``processed_twice``: a message's successful deletes beyond its first, not counting *stale* ones.
  A delete is stale when a later delivery of the message was given out: the message was taken
  again, which a take does only once the deleted delivery's visibility timeout had passed; that
  later take wrote its delivery with a newer timestamp than the receipt's, so the delete touched
  nothing, and SQS answers it as a success all the same (engine/delivery/settle.py). That is the one
  way a standard queue processes a message twice (``stale_deletes`` counts them), and it needs a
  visibility timeout to pass first; any other second delete is a violation. (A later delivery
  given only after the delete had succeeded is no excuse: ``delivered_after_delete`` counts it.)
* ``delivered_after_delete``: delivery n of a message given by a receive that began after a delete
  of its delivery n - 1 had succeeded: a delete of the message's latest delivery removed nothing.
* ``lost``: a message the run knew of (answered by a send, seen by a receive, held by the gate)
  whose latest delivery given out was never deleted, after the drain (a stale delete, of an
  earlier delivery, processed nothing: the message was still owed to a receive).
* ``unsent``: a message seen whose id no send answered and whose body's send was never retried.
  A retried send entry is a standard queue's at-least-once send: the failed attempt may have
  written it before the retry wrote it again, under another id (``copies``); nothing else can
  make a message no send answered.
* ``leftover``: a message the drain received that the run knew of before the drain. The run ends
  only once every message it knew of had its latest delivery deleted (``all_processed``), so each
  is one a delete did not remove. A copy no receive had seen yet is not left over: the run could
  not wait for it by name; the drain receives and deletes it (``copies_drained``).
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from .sqs_clients import Key, Seen

#: The counts that must be 0 (the module's docstring says what each one means).
VIOLATIONS = (
    "lost",
    "unsent",
    "deliveries_given_twice",
    "early_redeliveries",
    "processed_twice",
    "delivered_after_delete",
    "leftover",
)

#: Leeway of the early-redelivery check: timestamps in ms, a take's clock read a little after its
#: receive began, and ``time.monotonic`` against the servers' wall clock over a few seconds.
EARLY_SLACK_S = 0.5


@dataclass
class Outcome:
    sent: int = 0  # bodies sent, each answered
    messages: int = 0  # distinct message ids the run knew of
    processed: int = 0  # of those, with their latest delivery deleted
    lost: int = 0
    unsent: int = 0
    copies: int = 0  # messages a retried send's failed attempt wrote (seen under an id no send answered)
    deliveries_given_twice: int = 0
    early_redeliveries: int = 0
    processed_twice: int = 0
    stale_deletes: int = 0  # successful deletes of a delivery a visibility timeout had already ended
    delivered_after_delete: int = 0
    redelivered: int = 0  # deliveries seen with ApproximateReceiveCount > 1
    held: int = 0  # deliveries a gate held back (taken, never answered)
    held_came_back: int = 0  # of those, given again later with a higher ApproximateReceiveCount
    send_errors: int = 0
    sends_retried: int = 0
    receive_errors: int = 0
    delete_errors: int = 0
    leftover: int = 0
    copies_drained: int = 0
    seconds: float = 0.0
    examples: list[str] = field(default_factory=list)

    def line(self) -> str:
        body = " ".join(
            f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in vars(self).items() if k != "examples"
        )
        return body + (f" examples={self.examples[:5]}" if self.examples else "")


@dataclass
class Deleted:
    delivery: Seen
    at: float  # monotonic time the delete's success was answered


class Ledger:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: dict[Key, set[str]] = defaultdict(set)  # the ids send answers gave each body
        self.retried: set[Key] = set()  # bodies whose answered send was a retry
        self.seen: list[Seen] = []
        self.drained: list[Seen] = []
        self.held: list[tuple[str, int]] = []
        self.deleted: list[Deleted] = []
        self.outcome = Outcome()

    # ---- records (sqs_clients.Records) ------------------------------------------------------------
    def record_sent(self, key: Key, message_id: str, sequence: str, retried_at_ms: int | None) -> None:
        with self.lock:
            self.sent[key].add(message_id)
            if retried_at_ms is not None:
                self.retried.add(key)
                self.outcome.sends_retried += 1

    def record_seen(self, items: list[Seen]) -> None:
        with self.lock:
            self.seen += items

    def record_processed(self, delivery: Seen, at: float) -> None:
        with self.lock:
            self.deleted.append(Deleted(delivery, at))

    def record_refused(self, delivery: Seen, unanswered_before: bool) -> None:
        raise AssertionError(f"a standard queue refused a delete as expired (only FIFO queues do): {delivery}")

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            setattr(self.outcome, name, getattr(self.outcome, name) + n)

    def record_held(self, held: list[tuple[str, int]]) -> None:
        """Deliveries (MessageId, ApproximateReceiveCount) a server took whose answers were dropped."""
        with self.lock:
            self.held += held

    def record_drained(self, items: list[Seen]) -> None:
        """What the drain received (it records its deletes through ``record_processed``)."""
        with self.lock:
            self.drained += items

    # ---- questions while the run goes on -------------------------------------------------------
    def known_ids(self) -> set[str]:
        with self.lock:
            return self._known()

    def all_processed(self) -> bool:
        """Whether every message the run knows of had its latest delivery deleted."""
        return not self.unprocessed()

    def unprocessed(self) -> set[str]:
        """The messages the run knows of whose latest delivery was not deleted."""
        with self.lock:
            return self._known() - self._processed(self.seen)

    def _known(self) -> set[str]:
        return (
            {i for ids in self.sent.values() for i in ids}
            | {s.message_id for s in self.seen}
            | {i for i, _ in self.held}
        )

    def _latest(self, given: list[Seen]) -> dict[str, int]:
        """Each message's latest delivery given out (ApproximateReceiveCount), held ones included."""
        latest: dict[str, int] = defaultdict(int)
        for mid, rc in [(s.message_id, s.receive_count) for s in given] + self.held:
            latest[mid] = max(latest[mid], rc)
        return latest

    def _processed(self, given: list[Seen]) -> set[str]:
        """The messages whose latest delivery was deleted."""
        latest = self._latest(given)
        return {
            d.delivery.message_id for d in self.deleted if d.delivery.receive_count >= latest[d.delivery.message_id]
        }

    # ---- the counts ------------------------------------------------------------------------------
    def tally(self, visibility_s: float, seconds: float) -> Outcome:
        """The counts, from the records alone (see the module's docstring)."""
        out = self.outcome
        out.seconds = seconds
        answered = {i for ids in self.sent.values() for i in ids}
        before_drain = self._known()
        given = self.seen + self.drained
        known = before_drain | {s.message_id for s in self.drained}
        processed = self._processed(given)
        out.sent, out.messages = len(self.sent), len(known)
        out.processed = len(known & processed)
        out.lost = len(known - processed)
        self._origins(out, answered, given)
        out.leftover = sum(s.message_id in before_drain for s in self.drained)
        out.copies_drained = len(self.drained) - out.leftover
        self._deliveries(out, given, visibility_s)
        self._deletes(out, given)
        return out

    def _origins(self, out: Outcome, answered: set[str], given: list[Seen]) -> None:
        """Messages seen that no send answered: copies of a retried entry, or unsent."""
        for mid, key in {s.message_id: s.key for s in given if s.message_id not in answered}.items():
            if key in self.retried:
                out.copies += 1
            else:
                out.unsent += 1
                out.examples.append(f"unsent {mid} {key}")

    def _deliveries(self, out: Outcome, given: list[Seen], visibility_s: float) -> None:
        twice = Counter([(s.message_id, s.receive_count) for s in given] + self.held)
        for (mid, rc), n in twice.items():
            if n > 1:
                out.deliveries_given_twice += n - 1
                out.examples.append(f"delivery {mid} #{rc} given {n} times")
        out.redelivered = sum(s.receive_count > 1 for s in given)
        per_id: dict[str, list[Seen]] = defaultdict(list)
        for s in given:
            per_id[s.message_id].append(s)
        for mid, seen in per_id.items():
            seen.sort(key=lambda s: s.receive_count)
            for a, b in zip(seen, seen[1:]):
                if b.receive_count > a.receive_count and b.at < a.began + visibility_s - EARLY_SLACK_S:
                    out.early_redeliveries += 1
                    out.examples.append(f"{mid} #{b.receive_count} {b.at - a.began:.2f}s after #{a.receive_count}")
        out.held = len(self.held)
        out.held_came_back = sum(any(s.receive_count > rc for s in per_id.get(mid, [])) for mid, rc in self.held)

    def _deletes(self, out: Outcome, given: list[Seen]) -> None:
        latest = self._latest(given)
        per_id: dict[str, list[Deleted]] = defaultdict(list)
        for d in self.deleted:
            per_id[d.delivery.message_id].append(d)
        for mid, deletes in per_id.items():
            stale = sum(d.delivery.receive_count < latest[mid] for d in deletes)
            out.stale_deletes += stale
            if len(deletes) - stale > 1:
                out.processed_twice += len(deletes) - stale - 1
                out.examples.append(f"{mid} deleted {len(deletes)} times, {stale} stale")
        for s in given:
            if any(
                d.delivery.receive_count == s.receive_count - 1 and d.at < s.began for d in per_id.get(s.message_id, [])
            ):
                out.delivered_after_delete += 1
                out.examples.append(f"{s.message_id} #{s.receive_count} given after #{s.receive_count - 1} deleted")
