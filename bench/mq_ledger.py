"""The many-queues ledger (bench/many_queues.py): every message sent, delivered and deleted, counted in
this process, so that losses and duplicates come from what the server acknowledged, not from its own figures.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Ledger:
    sent: dict[str, tuple[str, float, bool]] = field(
        default_factory=dict
    )  # id -> (queue, send time, to an online owner)
    engine_id: dict[str, str] = field(default_factory=dict)  # ledger id -> casque's message id (to look a lost one up)
    outstanding: Counter = field(default_factory=Counter)  # queue -> sent and not yet deleted
    deliveries: Counter = field(default_factory=Counter)  # id -> times a client received it
    first_seen: dict[str, float] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    deleted_twice: int = 0
    unknown: int = 0  # bodies that are no ledger id of this run

    def send(self, mid: str, queue: str, at: float, online: bool, engine_id: str) -> None:
        self.engine_id[mid] = engine_id
        if mid not in self.sent:
            self.sent[mid] = (queue, at, online)
            if mid not in self.deleted:  # a fast owner can receive and delete before the send's answer arrives
                self.outstanding[queue] += 1

    def receive(self, body: str, now: float) -> str | None:
        mid = body.split(" ", 1)[0]
        if mid not in self.sent and not mid.startswith(("f", "l", "n")):
            self.unknown += 1
            return None
        self.deliveries[mid] += 1
        self.first_seen.setdefault(mid, now)
        return mid

    def delete(self, mid: str) -> None:
        if mid in self.deleted:
            self.deleted_twice += 1
            return
        self.deleted.add(mid)
        entry = self.sent.get(mid)
        if entry is not None:
            self.outstanding[entry[0]] -= 1

    def summary(self) -> dict[str, Any]:
        lost = [m for m in self.sent if m not in self.deleted]
        return {
            "sent": len(self.sent),
            "deleted": len(self.deleted & self.sent.keys()),
            "lost": len(lost),
            "lost_sample": lost[:10],
            "duplicate_deliveries": sum(n - 1 for n in self.deliveries.values() if n > 1),
            "deleted_twice": self.deleted_twice,
            "received_not_sent": len(self.deliveries.keys() - self.sent.keys()),
            "unknown_bodies": self.unknown,
        }
