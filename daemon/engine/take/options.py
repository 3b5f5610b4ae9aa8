"""What a fetch asks of every take it makes (``TakeOptions``), and what a take did (``TakeResult``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from daemon.base.model import Message


@dataclass(frozen=True)
class TakeOptions:
    """What one fetch asks of every take it makes. Durations are ms."""

    limit: int
    #: Replaces each message's own timeout (a pulled message's visibility timeout); None: its own.
    visibility_ms: int | None = None
    #: How long past its timeout a taken message stays invisible: the dispatcher's margin for
    #: clock skew (service/visibility.py); 0 for other consumers.
    hold_ms: int = 0
    #: Take a message up to this long before it is due (the dispatcher starts its handler at the
    #: due time): a timer fires on time although the take costs round trips.
    ahead_ms: int = 0
    #: None: take every message. Else the queue is shared with pull readers: take only these tasks.
    accepts: Callable[[str], bool] | None = None
    #: FIFO: at most one message per group (a daemon runs a group's messages one after another).
    one_per_group: bool = True
    #: Read the queue's top lane only (the consumer's top-lane check).
    top_lane_only: bool = False
    #: Asked as a take commits: keep the row's lock for this process's next take (receives waiting for this one,
    #: engine/delivery/joint_take.py), as a short hold (engine/take/holds.py ``adopt``). None: never.
    linger: Callable[[], bool] | None = None


@dataclass
class TakeResult:
    """What a take did: the messages taken (committed), and whether the row's lock was busy."""

    messages: list[Message] = field(default_factory=list)
    contended: bool = False
