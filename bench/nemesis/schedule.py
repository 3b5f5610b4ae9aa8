"""The fault schedule: every fault of a run, fixed up front from the seed, so a seed names one campaign.

Faults run in three lanes, each one fault at a time, the lanes side by side: nodes (at most one node down, frozen or
cut off at once: what RF 3 at QUORUM promises to survive), processes (daemons and servers) and queue settings. A
lane's next fault starts a random gap after its previous one's planned end; a fault that runs over its plan (a node
slow to restart) delays the rest of its lane, never overlaps it.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

NODE_KINDS = ("node_stop", "node_kill", "partition")
PROCESS_KINDS = ("daemon_kill", "server_kill", "daemon_skew")
SETTINGS_KINDS = ("queue_timeouts", "reshard")
KINDS = NODE_KINDS + PROCESS_KINDS + SETTINGS_KINDS
LANES = {"nodes": NODE_KINDS, "processes": PROCESS_KINDS, "settings": SETTINGS_KINDS}
#: Gap between two faults of one lane, seconds (from the seed).
GAPS = {"nodes": (10.0, 30.0), "processes": (5.0, 20.0), "settings": (15.0, 40.0)}
WARMUP_S = 20.0  # traffic flows before the first fault
CLOCK_TOLERANCE_MS = 5000  # the daemons' clock_tolerance default: skews stay well inside it


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the traffic started
    kind: str
    target: int  # node 1-3, daemon 0-2, server 0-1; 0 for a queue setting
    duration: float  # seconds the fault lasts (down, frozen, cut off); 0 for an instant one
    arg: int = 0  # the skew (ms), the new visibility timeout (ms), the new shard count
    arg2: int = 0  # the new lock timeout (ms)

    def line(self) -> str:
        extra = (f" arg={self.arg}" if self.arg else "") + (f" arg2={self.arg2}" if self.arg2 else "")
        return f"{self.at:7.1f}s {self.kind:<15} target={self.target} duration={self.duration:.1f}s{extra}"


def _one(rng: random.Random, kind: str, at: float, daemons: int, servers: int, partition: bool, shards: int) -> Fault:
    if kind == "node_stop":
        return Fault(at, kind, rng.randint(1, 3), round(rng.uniform(2, 10), 1))
    if kind == "node_kill":
        return Fault(at, kind, rng.randint(1, 3), round(rng.uniform(5, 20), 1))
    if kind == "partition":
        # Long enough for the others' failure detector to convict it (a shorter cut only times requests out).
        return Fault(at, kind if partition else "node_stop", rng.randint(1, 3), round(rng.uniform(10, 30), 1))
    if kind == "daemon_kill":
        return Fault(at, kind, rng.randrange(daemons), round(rng.uniform(0, 3), 1))
    if kind == "server_kill":
        return Fault(at, kind, rng.randrange(servers), round(rng.uniform(0, 3), 1))
    if kind == "daemon_skew":
        skew = rng.randint(500, CLOCK_TOLERANCE_MS * 3 // 5) * rng.choice((-1, 1))
        return Fault(at, kind, rng.randrange(daemons), 0.0, skew)
    if kind == "queue_timeouts":
        # lock timeouts from the least a queue accepts (2 s: engine/queues/settings.py MIN_LOCK_TTL_MS)
        return Fault(at, kind, 0, 0.0, rng.choice((3, 5, 8, 12, 20)) * 1000, rng.choice((2, 3, 5, 8)) * 1000)
    return Fault(at, "reshard", 0, 0.0, rng.choice([n for n in (2, 4, 6, 8) if n != shards]))


def plan(
    seed: int, seconds: float, daemons: int = 3, servers: int = 2, partition: bool = True, shards: int = 4
) -> list[Fault]:
    """The run's faults in start order. ``partition``: whether this machine can cut a node off (else a freeze takes
    its place, so the schedule's shape stays the seed's). ``shards``: the resharded queue's count at the start (a
    reshard to the current count changes nothing, so each picks another)."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    for lane, kinds in LANES.items():
        lane_rng = random.Random(rng.random())  # each lane its own stream: adding a kind to one keeps the others
        at = WARMUP_S + lane_rng.uniform(*GAPS[lane])
        while True:
            f = _one(lane_rng, lane_rng.choice(kinds), round(at, 1), daemons, servers, partition, shards)
            if f.at + f.duration > seconds - 10:
                break
            faults.append(f)
            shards = f.arg if f.kind == "reshard" else shards
            at = f.at + f.duration + lane_rng.uniform(*GAPS[lane])
    return sorted(faults, key=lambda f: f.at)


def lane_of(kind: str) -> str:
    return next(lane for lane, kinds in LANES.items() if kind in kinds)


def save(faults: list[Fault], path: Path) -> None:
    path.write_text(json.dumps([asdict(f) for f in faults], indent=1))
