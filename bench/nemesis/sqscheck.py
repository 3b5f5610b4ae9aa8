"""The SQS side of the checker: the standard and FIFO ledgers' own counts (tests/support: the same promises the SQS
fault tests hold the servers to), and each redelivery explained or not by a fault window."""

from __future__ import annotations

import time
from collections import defaultdict

from daemon.testing import standard_ledger
from daemon.testing.sqs_clients import Key, Seen

from .check import Duplicate, Findings, explainer, inside
from .faults import Window
from .traffic import VISIBILITY_S, SqsTraffic

#: A FIFO message processed twice is not one of them: its second delivery is a duplicate, explained by a fault or not
#: (``_deliveries``), as SQS's FIFO delivers again a message whose visibility ran out before its delete. One delivered
#: again after a delete of it was answered (a deleted message back) breaks its group's order (the ledger's ``_order``).
FIFO_VIOLATIONS = ("lost", "ids_per_dedup_over_one", "groups_out_of_order", "sequence_out_of_order")


def wall_offset() -> float:
    """What to add to a ``time.monotonic()`` reading (the SQS ledgers') to get wall-clock seconds."""
    return time.time() - time.monotonic()


def check_sqs(f: Findings, traffic: SqsTraffic, fifo_left: list[Key], seconds: float, windows: list[Window]) -> None:
    off = wall_offset()
    so = traffic.std.tally(VISIBILITY_S, seconds)
    fo = traffic.fifo.tally(fifo_left, seconds)
    for name, out, checked in (("sqs-standard", so, standard_ledger.VIOLATIONS), ("sqs-fifo", fo, FIFO_VIOLATIONS)):
        f.counts[f"sent {name}"] += out.sent
        for what in checked:
            n = getattr(out, what)
            if what == "lost":
                f.lost[name] += n
            if n:
                f.violate(f"{name} {what}", f"{n} ({out.line()})", out.examples[:10])
    f.counts["fifo groups out of order"] += fo.groups_out_of_order + fo.sequence_out_of_order
    if fo.groups_out_of_order:
        f.violate(
            "sqs-fifo order", "a group's deliveries, in the order their answers arrived:", _disorder(traffic, off)
        )
    for name, times in (("sqs-standard", traffic.std_times), ("sqs-fifo", traffic.fifo_times)):
        ledger = traffic.std if times is traffic.std_times else traffic.fifo
        _deliveries(f, name, ledger.seen, times.sent_at, getattr(ledger, "retried", set()), off, windows)


def _disorder(traffic: SqsTraffic, off: float) -> list[str]:
    """The deliveries around the first place a group's order breaks (the ledger folds a redelivery into the delivery
    it repeats, and wants 0, 1, 2, ...): each with when its receive began and its answer arrived, its receive count."""
    per_group: dict[str, list[Seen]] = defaultdict(list)
    for s in sorted(traffic.fifo.seen, key=lambda s: (s.at, s.index)):
        per_group[s.key[0]].append(s)
    for _, seen in sorted(per_group.items()):
        folded: list[int] = []
        for i, s in enumerate(seen):
            if folded and folded[-1] == s.key[1]:
                continue
            if s.key[1] != len(folded):
                return [
                    f"{x.key[0]}:{x.key[1]} {x.message_id} receive count {x.receive_count} began {x.began + off:.3f} "
                    f"answered {x.at + off:.3f}"
                    for x in seen[max(0, i - 6) : i + 6]
                ]
            folded.append(s.key[1])
    return []


def _deliveries(
    f: Findings,
    name: str,
    seen: list[Seen],
    sent_at: dict[Key, float],
    retried: set[Key],
    off: float,
    windows: list[Window],
) -> None:
    """Latency to each body's first delivery; a message given again is a duplicate (explained by a fault over the
    time its earlier delivery was in flight), and so is a copy of a body under a second message id, explained when
    its send was retried (a standard queue's at-least-once send; the ledger flags a copy of a send never retried)."""
    by_key: dict[Key, list[Seen]] = defaultdict(list)
    for s in sorted(seen, key=lambda s: s.at):
        by_key[s.key].append(s)
    for key, given in by_key.items():
        first = given[0]
        sent = sent_at.get(key)
        if sent is not None:
            got = first.at + off
            f.latencies.append((max(0.0, got - sent), inside(windows, sent, got), name))
        label = f"{key[0]}:{key[1]}"
        last: dict[str, Seen] = {}
        for s in given:
            prev = last.get(s.message_id)
            if prev is not None:
                a, b = prev.began + off, s.began + off
                f.duplicates.append(Duplicate(name, label, a, b, explainer(windows, 0, a, b)))
            elif last:
                why = "send retried" if key in retried else ""
                f.duplicates.append(Duplicate(name, label, first.at + off, s.at + off, why))
            last[s.message_id] = s
