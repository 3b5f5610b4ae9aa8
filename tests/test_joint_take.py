"""Concurrent receives of one standard queue share a take (engine/delivery/joint_take.py).

The group rules are checked on ``JointTakes`` itself, with takes that are plain coroutines the test
releases one by one (no Cassandra, no timing); then on the real node: eight receives at once from
a one-shard queue, each message received exactly once, in fewer takes than receives.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from daemon.base.errors import StorageUnavailable
from daemon.base.metrics import REGISTRY
from daemon.engine.client import Casque
from daemon.engine.delivery.joint_take import JOINT_CAP, JointTakes


class Takes:
    """Takes that hand out numbered items and end only when the test releases them."""

    def __init__(self) -> None:
        self.asked: list[int] = []  # what each take was asked for, in order
        self.gates: list[asyncio.Event] = []
        self.next = 0
        self.fail: Exception | None = None
        self.left = 1_000_000  # items the queue still holds

    def run(self, n: int) -> Any:
        async def take() -> list[int]:
            self.asked.append(n)
            gate = asyncio.Event()
            self.gates.append(gate)
            await gate.wait()
            if self.fail is not None:
                raise self.fail
            given = min(n, self.left)
            items = list(range(self.next, self.next + given))
            self.next, self.left = self.next + given, self.left - given
            return items

        return take()

    async def running(self, count: int) -> None:
        """Until ``count`` takes have begun (each begins within a few loop turns of its caller)."""
        for _ in range(1000):
            if len(self.asked) >= count:
                return
            await asyncio.sleep(0)
        raise AssertionError(f"{count} takes expected, {len(self.asked)} began")


async def one_take_running(cap: int = JOINT_CAP) -> tuple[JointTakes[int], Takes, asyncio.Task[list[int]]]:
    """A ``JointTakes`` with one receive's take of 10 under way (not yet released)."""
    joint: JointTakes[int] = JointTakes(cap)
    takes = Takes()
    first = asyncio.create_task(joint.take("q", 10, takes.run))
    await takes.running(1)
    return joint, takes, first


async def test_a_lone_receive_takes_at_once_for_itself() -> None:
    joint, takes, first = await one_take_running()
    assert takes.asked == [10]
    takes.gates[0].set()
    assert await first == list(range(10))
    assert not joint.busy("q")


async def test_receives_that_come_while_a_take_runs_share_the_next_one_in_arrival_order() -> None:
    joint, takes, first = await one_take_running()
    assert joint.busy("q")
    later = [asyncio.create_task(joint.take("q", n, takes.run)) for n in (3, 10, 5)]
    await asyncio.sleep(0)
    takes.gates[0].set()
    await takes.running(2)
    assert takes.asked == [10, 18]  # one take for the three that waited, not three
    takes.gates[1].set()
    assert await first == list(range(10))
    assert [await t for t in later] == [list(range(10, 13)), list(range(13, 23)), list(range(23, 28))]


async def test_members_answered_from_a_share_are_counted_and_takers_for_themselves_are_not() -> None:
    """``casque_receives_joined_total`` is what the SQS fault tests read from a server to know the joint path ran:
    the lone receive and the group's leader took for themselves, the two members were answered from shares."""
    before = joined()
    joint, takes, first = await one_take_running()
    later = [asyncio.create_task(joint.take("q", 10, takes.run)) for _ in range(3)]
    await asyncio.sleep(0)
    takes.gates[0].set()
    await first
    assert joined() == before  # a lone take
    await takes.running(2)
    takes.gates[1].set()
    await asyncio.gather(*later)
    assert joined() == before + 2


def joined() -> float:
    return REGISTRY.get_sample_value("casque_receives_joined_total") or 0.0


async def test_up_to_parallel_receives_take_at_once_and_the_next_share_the_first_slot_free() -> None:
    joint: JointTakes[int] = JointTakes()
    takes = Takes()
    own = [asyncio.create_task(joint.take("q", 10, takes.run, parallel=2)) for _ in range(2)]
    await takes.running(2)
    assert takes.asked == [10, 10]  # two shards: two takes at once, neither waited
    later = [asyncio.create_task(joint.take("q", 10, takes.run, parallel=2)) for _ in range(3)]
    await asyncio.sleep(0)
    assert joint.busy("q", parallel=2)
    takes.gates[1].set()  # the second take ends first: its slot goes to the group
    await takes.running(3)
    assert takes.asked == [10, 10, 30]
    takes.gates[0].set()
    takes.gates[2].set()
    assert [len(await t) for t in own + later] == [10] * 5
    assert not joint.busy("q", parallel=2)


async def test_a_short_take_gives_the_first_comers_their_share_and_the_last_nothing() -> None:
    joint: JointTakes[int] = JointTakes()
    takes = Takes()
    first = asyncio.create_task(joint.take("q", 1, takes.run))
    await takes.running(1)
    later = [asyncio.create_task(joint.take("q", 10, takes.run)) for _ in range(3)]
    await asyncio.sleep(0)
    takes.gates[0].set()
    await takes.running(2)
    takes.left = 12  # the queue holds 12 of the 30 asked
    takes.gates[1].set()
    await first
    assert [len(await t) for t in later] == [10, 2, 0]


async def test_a_group_full_to_the_cap_opens_the_next_behind_it() -> None:
    joint, takes, first = await one_take_running(cap=20)
    later = [asyncio.create_task(joint.take("q", 10, takes.run)) for _ in range(3)]
    await asyncio.sleep(0)
    takes.gates[0].set()
    await takes.running(2)
    assert takes.asked == [10, 20]  # the first two that waited; the third waits for the group after
    takes.gates[1].set()
    await takes.running(3)
    assert takes.asked == [10, 20, 10]
    takes.gates[2].set()
    await first
    assert [len(await t) for t in later] == [10, 10, 10]
    assert len({i for t in later for i in t.result()}) == 30


async def test_keys_do_not_share_a_take() -> None:
    joint: JointTakes[int] = JointTakes()
    takes = Takes()
    a = asyncio.create_task(joint.take(("q", 30_000), 10, takes.run))
    b = asyncio.create_task(joint.take(("q", 60_000), 10, takes.run))  # another visibility: its own take
    await takes.running(2)
    for gate in takes.gates:
        gate.set()
    assert len(await a) == len(await b) == 10


async def test_a_failed_take_fails_its_group_with_the_same_error() -> None:
    joint, takes, first = await one_take_running()
    later = asyncio.create_task(joint.take("q", 10, takes.run))
    await asyncio.sleep(0)
    takes.gates[0].set()
    await first
    await takes.running(2)
    takes.fail = StorageUnavailable("the node is down: start it")
    takes.gates[1].set()
    with pytest.raises(StorageUnavailable):
        await later
    assert not joint.busy("q")


async def test_members_of_a_cancelled_leader_take_for_themselves() -> None:
    joint, takes, first = await one_take_running()
    leader = asyncio.create_task(joint.take("q", 10, takes.run))  # leads the group behind the first take
    await asyncio.sleep(0)
    member = asyncio.create_task(joint.take("q", 5, takes.run))
    await asyncio.sleep(0)
    leader.cancel()  # its client went away while it waited for the first take
    await takes.running(2)
    assert takes.asked == [10, 5]  # the member's own take, for its own 5
    for gate in takes.gates:
        gate.set()
    await first
    assert len(await member) == 5
    with pytest.raises(asyncio.CancelledError):
        await leader


async def test_eight_receives_at_once_share_takes_and_get_each_message_once(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name, shards=1, buckets=1)
    sent = {str(await cq.send(queue_name, "t", {"n": i})) for i in range(400)}
    seen: list[str] = []
    answers = [0]

    async def receiver() -> None:
        while len(seen) < len(sent):
            got = await cq.receive(queue_name, max=10, wait=1, visibility=120)
            answers[0] += bool(got)
            seen.extend(str(d.message.id) for d in got)
            if got:
                assert all(await cq.delete_many([d.receipt for d in got]))

    takes_before = takes(queue_name)
    await asyncio.wait_for(asyncio.gather(*(receiver() for _ in range(8))), 120)
    assert sorted(seen) == sorted(sent), "each message received exactly once"
    took = takes(queue_name) - takes_before
    assert took < answers[0], f"{took} takes for {answers[0]} answers with messages: receives did not share takes"


def takes(queue: str) -> float:
    """Fetches that took messages from the queue (the take round-trip histogram's count)."""
    return REGISTRY.get_sample_value("casque_take_round_trips_count", {"queue": queue}) or 0.0


async def test_a_member_that_leaves_does_not_stop_its_group_and_its_share_goes_to_nobody_else() -> None:
    """Its share is taken and left unanswered: on the node it comes back after the visibility timeout, as an
    answer lost on the wire does (the others' shares are unchanged, not topped up with it)."""
    joint, takes, first = await one_take_running()
    leader = asyncio.create_task(joint.take("q", 10, takes.run))
    await asyncio.sleep(0)
    gone = asyncio.create_task(joint.take("q", 10, takes.run))
    stays = asyncio.create_task(joint.take("q", 10, takes.run))
    await asyncio.sleep(0)
    gone.cancel()  # its client went away while its group waited
    takes.gates[0].set()
    await first
    await takes.running(2)
    assert takes.asked == [10, 30]  # the group's take still asks for the member that left
    takes.gates[1].set()
    assert await leader == list(range(10, 20))
    assert await stays == list(range(30, 40))
    assert gone.cancelled()
