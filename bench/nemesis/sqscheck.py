"""The SQS side of the checker: the standard and FIFO ledgers' own counts (tests/support: the same promises the SQS
fault tests hold the servers to), and each redelivery explained or not by a fault window."""

from __future__ import annotations

import time
from collections import defaultdict

from tests.support import standard_ledger
from tests.support.sqs_clients import Seen

from .check import Duplicate, Findings, explainer, inside
from .faults import Window
from .traffic import VISIBILITY_S, SqsTraffic

FIFO_VIOLATIONS = ("lost", "processed_twice", "ids_per_dedup_over_one", "groups_out_of_order", "sequence_out_of_order")


def wall_offset() -> float:
    """What to add to a ``time.monotonic()`` reading (the SQS ledgers') to get wall-clock seconds."""
    return time.time() - time.monotonic()


def check_sqs(f: Findings, traffic: SqsTraffic, fifo_leftover: int, seconds: float, windows: list[Window]) -> None:
    off = wall_offset()
    so = traffic.std.tally(VISIBILITY_S, seconds)
    fo = traffic.fifo.tally(fifo_leftover, seconds)
    for name, out, checked in (("sqs-standard", so, standard_ledger.VIOLATIONS), ("sqs-fifo", fo, FIFO_VIOLATIONS)):
        f.counts[f"sent {name}"] += out.sent
        for what in checked:
            n = getattr(out, what)
            if what == "lost":
                f.lost[name] += n
            if n:
                f.violate(f"{name} {what}", f"{n} ({out.line()})", out.examples[:10])
    f.counts["fifo groups out of order"] += fo.groups_out_of_order + fo.sequence_out_of_order
    for name, times in (("sqs-standard", traffic.std_times), ("sqs-fifo", traffic.fifo_times)):
        ledger = traffic.std if times is traffic.std_times else traffic.fifo
        first: dict[tuple[str, int], Seen] = {}
        later: dict[tuple[str, int], list[Seen]] = defaultdict(list)
        for s in sorted(ledger.seen, key=lambda s: s.at):
            if s.key in first:
                later[s.key].append(s)
            else:
                first.setdefault(s.key, s)
        for key, s in first.items():
            sent = times.sent_at.get(key)
            if sent is not None:
                got = s.at + off
                f.latencies.append((max(0.0, got - sent), inside(windows, sent, got)))
            prev = s
            for again in later[key]:
                a, b = prev.began + off, again.began + off
                f.duplicates.append(Duplicate(name, f"{key[0]}:{key[1]}", a, b, explainer(windows, 0, a, b)))
                prev = again
