"""The ledger of what went through the daemons: every send by the casque client (what it was told, or the error),
and every handler record the daemons wrote (a start and an end of ``nemesis.step``, a cron firing, a failed attempt
of ``test.always_fail``, a FIFO group's step by ``test.fifo_step`` with its start and end). Times are wall-clock
seconds: the daemons record theirs with ``time.time()`` on this machine (the clock skew of a skewed daemon is the
engine's own offset, not its process's clock)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class Send:
    queue: str
    kind: str  # plain, delayed, priority, replace, keep, doomed, shared, cron
    n: int
    v: int  # a keyed send's version (1 first, 2 the second send of the key)
    asked: float
    answered: float = 0.0
    id: str = ""  # what the send answered ('' when it failed)
    due: float = 0.0  # when it may run (asked + delay)
    key: str = ""
    error: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.n}:{self.v}"

    def line(self) -> str:
        told = self.id or f"error {self.error[:80]}"
        return f"send {self.queue} {self.label} key={self.key or '-'} at {self.asked:.3f}: {told}"


@dataclass
class Run:
    """One handler record: ``what`` is start, end, tick or fail."""

    task: str
    id: str
    attempt: int
    pid: int
    at: float
    what: str
    label: str = ""  # kind:n:v (nemesis.step), key (nemesis.tick), group:n (test.fifo_step)
    occurrence: int = 0
    until: float = 0.0  # a FIFO step's end (``at`` is its start)

    def line(self) -> str:
        extra = f" occurrence {self.occurrence}" if self.what == "tick" else ""
        who = f"attempt {self.attempt} pid {self.pid} at {self.at:.3f}"
        return f"{self.what} {self.task} {self.id} {self.label}{extra} {who}"


def runs(record: Path) -> list[Run]:
    """The daemons' records, in the order written."""
    out: list[Run] = []
    if not record.exists():
        return out
    for line in record.read_text().splitlines():
        f = line.split()
        if len(f) == 8 and f[7] in ("ok", "fail"):  # test.fifo_step's: id attempt pid start end group n outcome
            what = "fifo" if f[7] == "ok" else "fifo-fail"
            out.append(
                Run("test.fifo_step", f[0], int(f[1]), int(f[2]), float(f[3]), what, f"{f[5]}:{f[6]}", 0, float(f[4]))
            )
            continue
        if len(f) < 5:
            continue  # a line cut by a kill -9 mid-write
        base = (f[0], f[1], int(f[2]), int(f[3]), float(f[4]))
        if f[0] == "nemesis.step" and len(f) >= 7:
            out.append(Run(*base, f[5], f[6]))
        elif f[0] == "nemesis.tick" and len(f) >= 8:
            out.append(Run(*base, "tick", f[6], int(f[7]) if f[7].isdigit() else 0))
        elif f[0] == "test.always_fail":
            out.append(Run(*base, "fail"))
    return out
