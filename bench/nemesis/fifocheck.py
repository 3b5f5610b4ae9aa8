"""The daemons' FIFO queue in the checker: a group's steps (``test.fifo_step`` records each with its start and end)
never two at once, in the order sent, each step of each group run, and one message per deduplication id however often
its send was retried."""

from __future__ import annotations

from collections import defaultdict

from .check import Duplicate, Findings, explainer, inside
from .faults import Window
from .ledger import Run, Send
from .traffic import FIFO_GROUPS

OVERLAP_SLACK_S = 0.002  # the two records' times are two processes' reads of one clock, rounded to 0.1 ms


def _lines(sends: list[Send], rs: list[Run]) -> list[str]:
    return [s.line() for s in sends] + [r.line() + f" until {r.until:.3f}" for r in sorted(rs, key=lambda r: r.at)]


def check_daemon_fifo(f: Findings, sends: list[Send], runs: list[Run], windows: list[Window]) -> None:
    fifo_sends = [s for s in sends if s.kind == "fifo"]
    step_of = {s.id: (s.key, s.n // FIFO_GROUPS) for s in fifo_sends if s.id}
    ids: dict[tuple[str, int], set[str]] = defaultdict(set)
    for s in fifo_sends:
        if s.id:
            ids[(s.key, s.n // FIFO_GROUPS)].add(s.id)
    tried = {(s.key, s.n // FIFO_GROUPS) for s in fifo_sends}
    for key, got in ids.items():
        if len(got) > 1:
            f.violate("fifo dedup", f"{key} answered with {len(got)} ids", _lines(fifo_sends, []))
    steps = [r for r in runs if r.task == "test.fifo_step"]
    ok: dict[str, list[Run]] = defaultdict(list)
    per_group: dict[str, list[Run]] = defaultdict(list)
    for r in steps:
        per_group[r.label.split(":")[0]].append(r)
        if r.what == "fifo":
            ok[r.id].append(r)
        group, step = r.label.split(":")
        if r.id not in step_of and (group, int(step)) not in tried:
            f.violate("unsent", f"FIFO step {r.label} ran, though no send of it was made", _lines([], [r]))
    for g, rs in per_group.items():
        rs.sort(key=lambda r: r.at)
        for a, b in zip(rs, rs[1:]):
            if b.at < a.until - OVERLAP_SLACK_S:
                f.violate("fifo in flight", f"group {g}: {b.label} started before {a.label} ended", _lines([], [a, b]))
        order: list[int] = []
        for r in rs:
            n = int(r.label.split(":")[1])
            if not order or order[-1] != n:
                order.append(n)
        if order != sorted(set(order)):
            f.counts["daemon fifo groups out of order"] += 1
            f.violate("fifo order", f"group {g} ran its steps in the order {order[:40]}", _lines([], rs[:20]))
    for mid, (g, n) in step_of.items():
        done = sorted(ok.get(mid, []), key=lambda r: r.at)
        if not done:
            f.lost["fifo"] += 1
            f.violate("lost", f"FIFO step {g}:{n} ({mid}) was answered but never run", _lines(fifo_sends, []))
            continue
        answered = min(s.answered for s in fifo_sends if s.id == mid)
        f.latencies.append((max(0.0, done[0].at - answered), inside(windows, answered, done[0].at), "fifo"))
        for a, b in zip(done, done[1:]):
            f.duplicates.append(Duplicate("daemon-fifo", f"{g}:{n}", a.at, b.at, explainer(windows, a.pid, a.at, b.at)))
