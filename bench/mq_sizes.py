"""The many-queues scenario's sizes (bench/many_queues.py): what a tiny queue is, and the quick, full,
test and light presets, so that the phases, the CLI and the tests read one definition of each size.
"""

from __future__ import annotations

from dataclasses import dataclass

TINY = {"shards": 1, "buckets": 1, "max_attempts": 1000}  # docs/design.md "Many queues": a tiny queue


@dataclass(frozen=True)
class Size:
    name: str
    queues: int
    messages: int  # the fill
    users: int  # online owners, one long-polling task each
    live_s: float  # how long users and producers run (the kill falls at half)
    send_rate: float  # producers' sends per second during the live phase
    wait_s: int = 5  # WaitTimeSeconds of a user's long poll
    visibility_s: int = 8
    create_concurrency: int = 64
    zipf_s: float = 1.0
    drain_concurrency: int = 48
    kill: bool = True
    #: the server's [cache] limits (engine's LRU bounds), lowered at small sizes so that the run
    #: passes them and shows memory levelling off; empty: the defaults
    cache: tuple[tuple[str, int], ...] = ()


QUICK = Size(
    "quick",
    queues=5_000,
    messages=5_000,
    users=200,
    live_s=30,
    send_rate=40,
    cache=(("queues", 1000), ("consumers", 250), ("activity", 1000)),
)
FULL = Size(
    "full",
    queues=1_000_000,
    messages=1_000_000,
    users=20_000,
    live_s=600,
    send_rate=300,
    wait_s=20,
    visibility_s=30,
    drain_concurrency=128,
)
TEST = Size(
    "test",
    queues=400,
    messages=400,
    users=20,
    live_s=8,
    send_rate=20,
    wait_s=2,
    visibility_s=3,
    drain_concurrency=16,
    cache=(("queues", 100), ("consumers", 50), ("activity", 100)),
)
#: the same path with 5 users and no kill: send→receive when the bench itself loads neither the server nor the node
LIGHT = Size("light", queues=50, messages=10, users=5, live_s=20, send_rate=5, wait_s=5, kill=False)
SIZES = {s.name: s for s in (QUICK, FULL, TEST, LIGHT)}
