"""The checker: the ledgers read after the run drained, every promise checked, each violation with the ledger lines
around it. A duplicate is explained when a fault window overlaps the time its first delivery was in flight (from its
start to the later delivery's) and could have ended it: its daemon killed or restarted, a node frozen, killed or
cut off, a server killed, the queue's timeouts changed (faults.Window.explains).

A cron occurrence run twice, both times as a first delivery, right after an occurrence of the same schedule so
explained, continues that fault's fork: a take batch in doubt, applied after the occurrence was taken again, leaves
two copies of the next occurrence, and while the daemons lag past the next fire time each copy writes its own
successor where its take ran (engine/schedules/triggers.py)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from .faults import Window
from .ledger import Run, Send

#: A due message may start this early: the daemons' clocks are skewed within the 5 s tolerance, so one may take it
#: up to that much before the wall clock says it is due (plus a second of the ledger's own rounding and scheduling).
EARLY_SLACK_S = 6.0
# A cron schedule that has not fired for this long before the traffic stopped has stopped. An occurrence in flight on
# a killed daemon comes back after the queue's visibility timeout (up to 20 s in the schedule) and a row lock's
# (up to 8 s), a node's restart takes ~20 s more: later than that is no longer a fault's delay.
CRON_STALE_S = 60.0


@dataclass
class Violation:
    what: str
    detail: str
    context: list[str] = field(default_factory=list)


@dataclass
class Duplicate:
    where: str  # daemon, shared, cron, sqs-standard
    label: str
    first: float
    second: float
    explained_by: str  # the fault kind, '' if none


@dataclass
class Findings:
    violations: list[Violation] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)
    lost: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    latencies: list[tuple[float, bool, str]] = field(default_factory=list)  # (seconds, inside a fault window, kind)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def violate(self, what: str, detail: str, context: list[str]) -> None:
        self.violations.append(Violation(what, detail, context))


def explainer(windows: list[Window], pid: int, a: float, b: float) -> str:
    return next((w.fault.kind for w in windows if w.explains(pid, a, b)), "")


def inside(windows: list[Window], a: float, b: float) -> bool:
    return any(w.covers(a, b) for w in windows)


class DaemonCheck:
    """The daemons' side: the casque sends against the handler records, the poison queue and the SQS deletes of the
    shared queue."""

    def __init__(
        self,
        sends: list[Send],
        runs: list[Run],
        poisoned: set[str],
        shared_deleted: dict[str, float],
        windows: list[Window],
        traffic_end: float,
    ) -> None:
        self.sends, self.runs, self.poisoned, self.windows = sends, runs, poisoned, windows
        self.shared_deleted = shared_deleted  # shared label -> the first SQS receive of it (wall s)
        self.traffic_end = traffic_end
        self.by_id: dict[str, list[Run]] = defaultdict(list)
        for r in runs:
            self.by_id[r.id].append(r)

    def context(self, ids: list[str], labels: list[str] = ()) -> list[str]:  # type: ignore[assignment]
        lines = [s.line() for s in self.sends if s.id in ids or s.label in labels]
        rs = [r for i in ids for r in self.by_id.get(i, [])]
        lines += [r.line() for r in sorted(rs, key=lambda r: r.at)]
        if rs:
            a, b = min(r.at for r in rs) - 15, max(r.at for r in rs) + 1
            lines += [
                f"fault {w.fault.kind} target={w.fault.target} {w.start:.3f}-{w.end:.3f}"
                for w in self.windows
                if w.covers(a, b)
            ]
        return lines

    def check(self, f: Findings) -> None:
        answered = [s for s in self.sends if s.id]
        failed_labels = {s.label for s in self.sends if s.error}
        for s in self.sends:
            f.counts[f"sent {s.kind}"] += bool(s.id)
            f.counts["send errors"] += bool(s.error)
        known = {s.id for s in answered}
        self._keyed(f, [s for s in answered if s.kind in ("replace", "keep")])
        for s in answered:
            if (s.kind, s.v) in (("replace", 1), ("keep", 2)):
                continue  # the replaced one must not run, the kept one's id is the first send's: _keyed checks both
            if s.kind in ("plain", "delayed", "priority", "shared", "replace", "keep"):
                self._message(f, s)
            elif s.kind == "doomed" and s.id not in self.poisoned:
                f.lost["doomed (not poisoned)"] += 1
                f.violate(
                    "lost", f"doomed {s.label} failed its attempts but is not in the poison queue", self.context([s.id])
                )
        # A doomed send that failed may have been written all the same: its message fails and is poisoned under an id
        # the ledger never learnt. As many such as failed doomed sends are accounted for; any more is a violation.
        unknown_doomed = sum(1 for s in self.sends if s.kind == "doomed" and s.error)
        accounted: set[str] = set()
        for pid in sorted(self.poisoned - {s.id for s in answered if s.kind == "doomed"}):
            ran = self.by_id.get(pid, [])
            if pid not in known and ran and ran[0].what == "fail" and len(accounted) < unknown_doomed:
                accounted.add(pid)
                continue
            f.violate("poisoned", f"{pid} poisoned, though its handler never fails", self.context([pid]))
        f.counts["doomed sends failed, written and poisoned"] = len(accounted)
        for mid, rs in self.by_id.items():
            if mid in known or mid in accounted or rs[0].what in ("tick", "fifo", "fifo-fail"):
                continue
            if rs[0].label not in failed_labels:
                f.violate("unsent", f"{mid} ran, though no send answered it or failed", self.context([mid]))
        self._cron(f)

    def _message(self, f: Findings, s: Send) -> None:
        rs = self.by_id.get(s.id, [])
        starts = sorted((r for r in rs if r.what == "start"), key=lambda r: r.at)
        ends = sorted((r for r in rs if r.what == "end"), key=lambda r: r.at)
        sqs_at = self.shared_deleted.get(s.label) if s.kind == "shared" else None
        if not ends and sqs_at is None:
            f.lost[s.kind] += 1
            f.violate("lost", f"{s.label} ({s.id}) was answered but never handled", self.context([s.id]))
            return
        attempts = [r.attempt for r in starts]
        if len(attempts) != len(set(attempts)):
            f.violate("same attempt twice", f"{s.label} ({s.id}): attempts {attempts}", self.context([s.id]))
        first = min([r.at for r in starts or ends] + ([sqs_at] if sqs_at is not None else []))
        if s.due and first < s.due - EARLY_SLACK_S:
            f.violate("ran early", f"{s.label} started {s.due - first:.1f}s before its due", self.context([s.id]))
        ready = max(s.due, s.answered)  # a slow send's message can't be waited for before its send was answered
        f.latencies.append((max(0.0, first - ready), inside(self.windows, ready, first), s.kind))
        deliveries = [(r.at, r.pid) for r in starts if any(e.attempt == r.attempt for e in ends)]
        deliveries += [(sqs_at, 0)] if sqs_at is not None else []
        deliveries.sort()
        for (a, pid), (b, _) in zip(deliveries, deliveries[1:]):
            where = "shared" if s.kind == "shared" else "daemon"
            f.duplicates.append(Duplicate(where, s.label, a, b, explainer(self.windows, pid, a, b)))

    def _keyed(self, f: Findings, keyed: list[Send]) -> None:
        """replace: the second send's message runs, the first's never (both sent long before either is due); keep:
        the second send answers the first's id, and the first's payload runs."""
        by_key: dict[str, dict[int, Send]] = defaultdict(dict)
        for s in keyed:
            by_key[s.key][s.v] = s
        for key, vs in by_key.items():
            if 1 not in vs or 2 not in vs:
                continue  # a send failed: the key's outcome is unknown
            one, two = vs[1], vs[2]
            f.counts[f"keys {one.kind}"] += 1
            if one.kind == "replace":
                ran = [r for r in self.by_id.get(one.id, []) if r.what == "start"]
                if ran and two.answered < one.due - 1:
                    f.violate("replace", f"key {key}: the replaced message ran", self.context([one.id, two.id]))
            elif two.id != one.id:
                f.violate(
                    "keep",
                    f"key {key}: the second send made {two.id}, not kept {one.id}",
                    self.context([one.id, two.id]),
                )
            else:
                labels = {r.label for r in self.by_id.get(one.id, []) if r.what == "end"}
                if labels - {one.label}:
                    f.violate(
                        "keep", f"key {key}: ran {sorted(labels)}, not the kept {one.label}", self.context([one.id])
                    )

    def _cron(self, f: Findings) -> None:
        ticks: dict[str, dict[int, list[Run]]] = defaultdict(lambda: defaultdict(list))
        for r in self.runs:
            if r.what == "tick":
                ticks[r.label][r.occurrence].append(r)
        for key in sorted({s.key for s in self.sends if s.kind == "cron" and s.id}):
            occ = ticks.get(key, {})
            f.counts["cron firings"] += len(occ)
            if not occ or max(r.at for rs in occ.values() for r in rs) < self.traffic_end - CRON_STALE_S:
                f.violate("cron stopped", f"schedule {key} stopped firing before the traffic ended", [])
                continue
            numbers = sorted(occ)
            f.counts["cron occurrences skipped"] += numbers[-1] - numbers[0] + 1 - len(numbers)
            forked: dict[int, str] = {}  # occurrence -> the fault whose fork ran it twice, both first deliveries
            for n in numbers:
                rs = sorted(occ[n], key=lambda r: r.at)
                for a, b in zip(rs, rs[1:]):
                    first = a.attempt == b.attempt == 1
                    why = explainer(self.windows, a.pid, a.at - 1, b.at) or (forked.get(n - 1, "") if first else "")
                    if why and first:
                        forked[n] = why
                    f.duplicates.append(Duplicate("cron", f"{key}#{n}", a.at, b.at, why))
