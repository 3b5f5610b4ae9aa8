"""How big each part of the suite is, in the quick mode and the full one."""

from __future__ import annotations

from dataclasses import dataclass

#: the parts whose results go to bench/out/results-<mode>.json and the report between the bench markers, in the
#: order they run: measured against the engine with one client (``MEASURED``), then each in its own processes
MEASURED = ("e2e", "takes", "idle", "sched", "tomb", "peers", "stress", "profile", "fair")
SEPARATE = ("settle", "parked", "pipeline", "soak", "moto-sqs", "sqs-cpu")
ENGINE_PARTS = MEASURED + SEPARATE
#: each with its own results file and docs section: casque, pgqueuer and Dramatiq at three sizes (bench/sizes.py);
#: the SQS endpoint and FIFO queues beside ElasticMQ (bench/sqs.py, bench/sqs_fifo.py)
OWN_FILE_PARTS = ("sizes", "sqs", "sqs-fifo")
PARTS = ENGINE_PARTS + OWN_FILE_PARTS


@dataclass(frozen=True)
class Plan:
    name: str
    # 1. end to end
    sweep_n: int
    sweep_consumers: tuple[int, ...]
    sweep_batches: tuple[int, ...]
    confirm_top: int  # re-run this many of the best settings (plus the defaults)...
    confirm_repeats: int  # ...this many times each, interleaved, and pick by the median
    confirm_n: int
    half_load_seconds: float
    # 1c. round trips per take (low load) and the idle daemon's requests
    takes_rate: float
    takes_seconds: float
    idle_warmup_s: float
    idle_seconds: float
    # 2. scheduling
    schedule_seconds: float
    delayed_messages: int
    # 3. tombstones
    tomb_checkpoints: tuple[int, ...]  # probe casque's polls when this many are acked; the last is the total
    tomb_rate_fraction: float  # offered rate = this × the best end-to-end throughput...
    tomb_min_rate: float
    tomb_max_rate: float
    tomb_max_seconds: float  # ...but fast enough to finish in this long
    naive_checkpoints: tuple[int, ...]
    naive_limit_seconds: float  # the naive queue stops when one round takes longer than this
    # 4. peers
    peer_n: int
    concurrency: int
    peer_rounds: int  # every system runs this many times, interleaved
    equal_seconds: float  # the equal-load latency runs: every system at the same offered rate
    # 5. physical limit
    stress_ops: int
    # 6. profile
    profile_n: int
    # 8-13: fair queues, the many-queues probes, the bulk load, the soak (moto-sqs has one size)
    fair_backlog: int
    settle_queues: int
    parked_users: int
    soak_messages: int
    soak_kills: int
    soak_node_loss: bool  # the 3-node cluster of its own that loses a node
    pipeline_rows: int


QUICK = Plan(
    name="quick",
    sweep_n=6_000,
    sweep_consumers=(8, 16),
    sweep_batches=(200, 400),
    confirm_top=0,
    confirm_repeats=0,
    confirm_n=0,
    half_load_seconds=15,
    takes_rate=20,
    takes_seconds=15,
    idle_warmup_s=15,
    idle_seconds=30,
    schedule_seconds=20,
    delayed_messages=400,
    tomb_checkpoints=(20_000, 30_000, 40_000),
    tomb_rate_fraction=0.6,
    tomb_min_rate=500,
    tomb_max_rate=20_000,
    tomb_max_seconds=45,
    naive_checkpoints=(5_000, 10_000, 20_000, 40_000),
    naive_limit_seconds=45,
    peer_n=5_000,
    concurrency=32,
    peer_rounds=1,
    equal_seconds=8,
    stress_ops=30_000,
    profile_n=15_000,
    fair_backlog=20_000,
    settle_queues=2_048,
    parked_users=2_000,
    soak_messages=10_000,
    soak_kills=3,
    soak_node_loss=False,
    pipeline_rows=20_000,
)

FULL = Plan(
    name="full",
    sweep_n=20_000,
    sweep_consumers=(1, 2, 4, 8, 16, 32),
    sweep_batches=(25, 50, 100, 200, 400),
    confirm_top=3,
    confirm_repeats=2,
    confirm_n=40_000,
    half_load_seconds=60,
    takes_rate=20,
    takes_seconds=30,
    idle_warmup_s=20,
    idle_seconds=60,
    schedule_seconds=60,
    delayed_messages=3_000,
    tomb_checkpoints=(100_000, 200_000, 300_000, 400_000, 500_000, 600_000, 700_000, 800_000, 900_000, 1_000_000),
    tomb_rate_fraction=0.6,
    tomb_min_rate=500,
    tomb_max_rate=20_000,
    tomb_max_seconds=720,
    naive_checkpoints=(5_000, 10_000, 20_000, 40_000, 60_000, 80_000, 100_000, 120_000, 150_000),
    naive_limit_seconds=180,
    peer_n=30_000,
    concurrency=32,
    peer_rounds=2,
    equal_seconds=20,
    stress_ops=300_000,
    profile_n=60_000,
    fair_backlog=100_000,
    settle_queues=24_576,  # the full many-queues size's [cache] consumers: the queues a server keeps
    parked_users=20_000,
    soak_messages=100_000,
    soak_kills=20,
    soak_node_loss=True,
    pipeline_rows=100_000,
)
