"""What the FIFO benchmark (bench/sqs_fifo.py) runs: the systems it compares, the scenarios (message
groups, high-throughput mode) and the sizes, with the receive's wait and visibility, in one place so that
the run, the report and the tests read the same definitions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .sqs import EMQ_VERSION, casque_serve, elasticmq

WAIT_S = 1  # long poll of each receive
VISIBILITY_S = 120  # far longer than a drain: a redelivery in the table is a real duplicate, not a slow client
TRANSPORT_RETRIES = 3
SYSTEMS: dict[str, tuple[str, Callable[..., Any]]] = {
    "casque": ("casque serve", casque_serve),
    "elasticmq": (f"ElasticMQ {EMQ_VERSION} (in memory)", elasticmq),
}


@dataclass(frozen=True)
class Scenario:
    key: str
    label: str
    groups: int
    high_throughput: bool = False

    def attributes(self) -> dict[str, str]:
        attrs = {"FifoQueue": "true"}
        if self.high_throughput:
            attrs |= {"DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"}
        return attrs


SCENARIOS = (
    Scenario("g1", "1 group", 1),
    Scenario("g10", "10 groups", 10),
    Scenario("g1000", "1,000 groups", 1000),
    Scenario("g1000-ht", "1,000 groups, high throughput", 1000, high_throughput=True),
)


@dataclass(frozen=True)
class Size:
    name: str
    messages: int  # per scenario, system and round (rounded down to whole batches of 10)
    rounds: int  # every scenario runs this many times on each system; the table shows the median
    senders: int
    receivers: int
    idle_s: float  # the drain ends when nothing has come for this long (what is left is lost)
    # a ReceiveRequestAttemptId on every receive: a receive retried after a transport error then gets the same messages
    # back; off by default, as most SDK users send none (it costs casque a Cassandra write per receive)
    attempt_ids: bool = False
    # messages through every server before the first measured run (ElasticMQ's JIT, casque's prepared statements)
    warmup: int = 1000


QUICK = Size("quick", messages=1000, rounds=1, senders=8, receivers=8, idle_s=20)
FULL = Size("full", messages=5000, rounds=3, senders=8, receivers=8, idle_s=30)
