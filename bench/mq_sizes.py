"""The many-queues scenario's sizes (bench/many_queues.py): what a tiny queue is, and the quick, full,
test and light presets, so that the phases, the CLI and the tests read one definition of each size.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypedDict


class QueueShape(TypedDict):
    """``create_queue``'s shape options, as keywords."""

    shards: int
    buckets: int
    max_attempts: int


TINY: QueueShape = {"shards": 1, "buckets": 1, "max_attempts": 1000}  # docs/design.md "Many queues": a tiny queue


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
    #: seconds over which the users' first long polls are spread (0: all at once)
    ramp_s: float = 0.0
    #: the noisy-neighbour phase (bench/mq_noisy.py): user A's backlog, A's concurrent receivers, and the
    #: single messages to user B measured with A's queue empty and again over A's drain
    noisy_backlog: int = 100_000
    noisy_consumers: int = 4
    noisy_probes: int = 50
    #: the drain visits every queue that got a message, and this many idle ones (a random sample): the
    #: cost of looking at an idle queue is a per-request figure, which a sample measures as well as all N
    idle_sample: int = 20_000
    #: seconds with the server up and no client, over which the node's reads are counted
    idle_s: float = 60.0
    #: seconds between the last client request and that window: a queue's rows settle (and cost no reads) once
    #: swept up to a cursor 60 s old, at the sweep's next pass (engine/consume/sweep.py), so 60 + 30 s
    settle_s: float = 90.0
    #: what this size scales down from the issue's, and why (the report prints it); empty: nothing
    scaled: str = ""


QUICK = Size(
    "quick",
    queues=5_000,
    messages=5_000,
    users=200,
    live_s=30,
    send_rate=40,
    noisy_backlog=10_000,
    idle_sample=2_000,
    idle_s=30,
)
#: users: one `casque serve` process on this box answers about 280 long polls a second at a full core (~2.7 ms of CPU
#: a poll, half of it in the HTTP stack); 3,000 users polling every 20 s ask 150 a second, which leaves the server
#: room, so send→receive measures casque, not a queue at one saturated core.
FULL_SCALED = (
    "3,000 users long-polling and producers at 50 msg/s, not the issue's 20,000 users: one `casque serve` process "
    "on this box (2 cores, shared with the node and the bench's clients) answers about 280 long polls a second at a "
    "full core (a probe with 19,000 users, who ask 950 a second: 83-90 % of a core, ~2.7 ms of CPU a poll, and sends "
    "waited minutes); 20,000 users need several server processes on more cores"
)
FULL = Size(
    "full",
    queues=1_000_000,
    messages=1_000_000,
    users=3_000,
    live_s=600,
    send_rate=50,
    wait_s=20,
    visibility_s=30,
    drain_concurrency=128,
    ramp_s=60,
    scaled=FULL_SCALED,
)
#: tests/test_bench_many_queues.py: each phase as short as its assertions allow. live_s: the kill at 2 s, with sends
#: and long polls before and after it; noisy_backlog: A's drain must last long enough for half of B's probes to be
#: sent during it (2,500 was too short: 8 of 20 in a CI run); idle_s: a window over which the reads are counted, not a
#: rate to measure to a decimal.
TEST = Size(
    "test",
    queues=400,
    messages=400,
    users=20,
    live_s=4,
    send_rate=20,
    wait_s=2,
    visibility_s=3,
    drain_concurrency=16,
    noisy_backlog=5_000,
    noisy_probes=20,
    idle_sample=400,
    idle_s=2,
    settle_s=0,
)
#: a twentieth of the full size's queues and a tenth of its users, the full noisy backlog: what this shared
#: 2-core box runs end to end in a quarter of an hour, to extrapolate the full size from (full_estimate_min)
MEDIUM = replace(
    FULL,
    name="medium",
    queues=50_000,
    messages=50_000,
    users=2_000,
    live_s=120,
    send_rate=100,
    idle_sample=5_000,
    ramp_s=10,
    scaled="",
)
#: the same path with 5 users and no kill: send→receive when the bench itself loads neither the server nor the node
LIGHT = Size(
    "light",
    queues=50,
    messages=10,
    users=5,
    live_s=20,
    send_rate=5,
    wait_s=5,
    kill=False,
    noisy_backlog=1_000,
    idle_s=5,
    settle_s=0,
)
SIZES = {s.name: s for s in (QUICK, FULL, TEST, LIGHT, MEDIUM)}
