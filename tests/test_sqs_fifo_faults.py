"""FIFO over SQS with the faults made to happen (issue 25): boto3 producers and receivers spread over
two real ``casque serve`` processes, one FIFO queue, 1,000 message groups, counted from a ledger
(daemon/testing/fifo_ledger.py): every group processed in the order sent, nothing lost, nothing
processed twice, one message per deduplication id.

A message is *processed* when its receiver's DeleteMessageBatch entry succeeds. Clients behave as
SDK users do (daemon/testing/sqs_clients.py): a request that fails is retried on the other server,
a send with the same MessageDeduplicationId, a delete with the same receipt handles.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urlparse

import pytest

from daemon.base.config import Settings
from daemon.engine.storage.db import Database
from daemon.engine.storage.table import KIND_MESSAGE, STATE_IN_FLIGHT
from daemon.testing import sqsserver
from daemon.testing.fifo_ledger import Ledger, Outcome
from daemon.testing.sqs_clients import Clients, Producer, Receiver, Seen, client, drain, key_of, poll, run_clients
from tests.support.answer_gate import AnswerGate
from tests.support.stall_node import STALL_NODE, freeze_node, servers_on_own_node

pytestmark = [pytest.mark.reliability, pytest.mark.slow]
GROUPS = 1000
PER_GROUP = 3
PRODUCERS = 4
RECEIVERS = 4


STALL_KEYSPACE = "casque_fifo_stall"


@pytest.fixture
def servers(settings: Settings) -> Iterator[list[sqsserver.SqsServer]]:
    """Two servers of their own (one of them may be killed)."""
    pair = [sqsserver.start(settings.cassandra.keyspace) for _ in range(2)]
    yield pair
    for s in pair:
        s.stop()


@pytest.fixture
def stall_servers() -> Iterator[list[sqsserver.SqsServer]]:
    """The fault tests' node (never the shared dev node), and two servers on it whose Cassandra requests time out after
    2 s: a request the frozen node holds fails (the take may or may not have been applied)."""
    with servers_on_own_node(STALL_NODE, STALL_KEYSPACE) as pair:
        yield pair


@dataclass
class FifoClients(Clients[Ledger]):
    queue: str

    def sending_through(self, url: str, for_s: float) -> bool:
        """Whether a producer's batch has been waiting on ``url`` for ``for_s`` (so some of its
        entries are written: a FIFO batch is written entry by entry). A batch begun before the gate
        held answers counts too: its answer is dropped all the same, and while it waits its producer
        sends nothing else (a batch begun only after the hold was required once; when all four
        producers were already waiting on the gate, none came: CI of 2026-11-24)."""
        now = time.monotonic()
        return any(
            o is not None and o[0] == url and now - o[1] >= for_s for o in (t.ends.outstanding for t in self.producers)
        )


def run(
    urls: list[str],
    visibility_s: int,
    fault: Callable[[FifoClients], None] | None = None,
    live: Callable[[], list[str]] | None = None,
    receivers_after: float = 0.0,
    deadline_s: float = 240,
) -> Outcome:
    """The traffic of one test: PRODUCERS threads send PER_GROUP messages to each of GROUPS groups
    (a producer owns GROUPS / PRODUCERS of them), RECEIVERS threads receive and delete, both spread
    over ``urls``. Receivers start once
    ``receivers_after`` of the messages were sent (a backlog: their receives take at once rather
    than wait); ``fault(clients)`` then runs in this thread.
    Ends when every message sent was processed, then drains the queue for what is left over."""
    started = time.monotonic()
    name = f"ff-{uuid.uuid4().hex[:10]}.fifo"
    made = client(urls[0]).create_queue(
        QueueName=name, Attributes={"FifoQueue": "true", "VisibilityTimeout": str(visibility_s)}
    )
    path = urlparse(made["QueueUrl"]).path
    ledger, done = Ledger(), threading.Event()
    groups = [f"g{i:04d}" for i in range(GROUPS)]
    c = FifoClients(
        [Producer(urls, path, groups[i::PRODUCERS], PER_GROUP, ledger, i % len(urls)) for i in range(PRODUCERS)],
        [Receiver(urls, path, ledger, i % len(urls), done) for i in range(RECEIVERS)],
        ledger,
        name,
    )
    total = GROUPS * PER_GROUP
    run_clients(
        c,
        lambda: len(ledger.sent) >= total * receivers_after,
        (lambda: fault(c)) if fault is not None else None,
        lambda: len(ledger.processed_keys()) >= total,
        deadline_s,
    )
    left = drain(live() if live else urls, path, visibility_s + 1)
    return ledger.tally([key_of(m) for m in left], time.monotonic() - started)


def check(out: Outcome) -> None:
    """What every test asserts: the FIFO promises, counted from the ledger."""
    assert out.sent == GROUPS * PER_GROUP, out.line()
    assert out.lost == 0, out.line()
    assert out.processed_twice == 0, out.line()
    assert out.ids_per_dedup_over_one == 0, out.line()
    assert out.groups_out_of_order == 0, out.line()
    assert out.sequence_out_of_order == 0, out.line()
    assert out.leftover == 0, out.line()


def test_two_servers_1000_groups_keep_order_and_lose_and_duplicate_nothing(servers: list[sqsserver.SqsServer]) -> None:
    out = run([s.url for s in servers], visibility_s=5)
    print(out.line())
    check(out)
    assert out.redelivered == 0, out.line()  # no fault: no visibility timeout should have passed


def in_flight(db: Database, queue: str) -> set[str]:
    """The ids of the queue's messages in flight, read from its shard rows (a FIFO queue has one
    bucket; a message in flight stays at its position with its state set)."""
    shards = db.execute(f"SELECT shards FROM {db.settings.keyspace}.queues WHERE name = %s", [queue]).one().shards
    cql = (
        f"SELECT id, state FROM {db.settings.keyspace}.messages WHERE queue = %s AND bucket = 0 AND shard = %s AND "
        "kind = %s"
    )
    return {
        str(r.id)
        for shard in range(shards)
        for r in db.execute(cql, [queue, shard, KIND_MESSAGE])
        if r.state == STATE_IN_FLIGHT
    }


def hold_answers_then_kill(c: FifoClients, victim: sqsserver.SqsServer, gate: AnswerGate, db: Database) -> int:
    """The victim's clients reach it through ``gate``. Park the other server's receivers (each after
    its last delete), hold the victim's answers back, and wait until Cassandra has messages in
    flight that no receiver has seen, once every victim receiver has had an answer begun after the
    look: those were taken by the victim's receives, and their answers will never arrive. Then wait
    for a send batch waiting on the gate (its entries written, or being written: a FIFO batch is
    written entry by entry), kill -9 the victim and let the others receive again. A producer can't
    finish meanwhile: every other batch of its goes to the victim, and waits. Returns how many
    messages the victim's receives held.

    Why park the others: with all four producers soon waiting on the gate, the few messages still
    coming were a race between the two servers' receivers, and when the other server's took them
    all, the victim's took nothing for 60 s (CI of 2026-11-25, 19 looks). Parked, only the victim's
    receivers can take the batches the producers' held sends still write.

    A message counts as held if no receiver saw its first delivery: under load one look-and-wait
    can outlast the 5 s visibility timeout, and a held message seen again on its second delivery
    before the next look is still one the victim took."""
    threads = c.threads
    parked = [r for r in c.receivers if r.ends.urls[r.ends.current] != gate.url]
    victims = [r for r in c.receivers if r not in parked]
    assert victims, "no receiver reaches the victim"
    for r in parked:
        r.may_receive.clear()
    try:
        poll(lambda: all(r.parked.is_set() for r in parked), 60, "the other server's receivers parked", threads)
        gate.holding.set()
        held: set[str] = set()
        deadline, looks = time.monotonic() + 60, 0
        while not held:
            assert time.monotonic() < deadline, (
                f"the victim's receives took nothing while their answers were held ({looks} looks; waiting on the "
                f"gate: {[r.ends.outstanding for r in victims]})"
            )
            looks += 1
            looked = time.monotonic()
            taken = in_flight(db, c.queue)
            poll(
                # mypy can't type a lambda whose default binds the loop's value (python/mypy#15459)
                lambda looked=looked: all(  # type: ignore[misc]
                    r.answered_began > looked or (r.ends.outstanding or ("", 0))[0] == gate.url for r in victims
                ),
                60,
                "an answer to every victim receiver not waiting on the gate",
                threads,
            )
            held = taken - c.ledger.first_delivery_ids()
        poll(lambda: c.sending_through(gate.url, 0.3), 60, "a send batch under way through the victim", threads)
        victim.proc.kill()
        victim.proc.wait(timeout=30)
    finally:
        for r in parked:
            r.may_receive.set()
    return len(held)


def test_kill_9_of_one_server_mid_run_its_clients_retry_on_the_other(
    servers: list[sqsserver.SqsServer], settings: Settings
) -> None:
    """kill -9 of one server while a send batch is under way through it and its receives hold
    messages taken and not answered (hold_answers_then_kill). Its clients retry on the other: a
    send retried with its dedup id is not written twice (entries its failed attempt had written
    are answered with their first position); the messages its receives had taken, whose answers never arrived, come
    back after the 5 s visibility timeout, in their group's order, first seen with ApproximateReceiveCount 2."""
    victim = servers[0]
    held: list[int] = []
    db = Database(settings.cassandra).connect()
    gate = AnswerGate(victim.url)
    try:
        out = run(
            [gate.url, servers[1].url],
            visibility_s=5,
            live=lambda: [servers[1].url],
            receivers_after=0.05,
            fault=lambda c: held.append(hold_answers_then_kill(c, victim, gate, db)),
        )
    finally:
        gate.close()
        db.close()
    print(f"{out.line()} held_by_the_killed_server={held}")
    check(out)
    assert victim.proc.returncode == -9
    assert out.retries_placed_by_first_attempt > 0, (
        f"no retried send had been written by the killed server: {out.line()}"
    )
    assert held[0] > 0 and out.first_seen_redelivered >= held[0], (
        f"the messages the killed server took came back: {out.line()}"
    )


def test_a_node_frozen_while_receives_take_loses_duplicates_and_reorders_nothing(
    stall_servers: list[sqsserver.SqsServer],
) -> None:
    """The Cassandra node frozen (SIGSTOP) for 4 s while receives through both servers are taking,
    then let go (SIGCONT). Requests it held fail after the servers' 2 s request timeout (a take
    batch may have been applied all the same: its messages come back after the 10 s visibility
    timeout, in their group's order); clients retry. Still 0 lost, 0 processed twice, order kept."""
    freezes: list[int] = []
    out = run(
        [s.url for s in stall_servers],
        visibility_s=10,
        receivers_after=0.3,
        fault=lambda c: freezes.append(
            freeze_node(
                STALL_NODE,
                c.receivers,
                lambda: c.ledger.outcome.receive_errors + c.ledger.outcome.delete_errors,
                c.threads,
            )
        ),
    )
    print(f"{out.line()} freezes={freezes}")
    check(out)
    assert out.receive_errors + out.delete_errors > 0, f"the freeze failed no receive or delete: {out.line()}"


def test_the_ledger_counts_each_violation_it_is_shown() -> None:
    """The counting itself, on records made by hand: a check that can't fail proves nothing. Group a
    is delivered 0, 2, 1; b's 0 is processed twice and redelivered; c's 1 is lost and c's 0 came
    under two message ids; d's sequence numbers go down; e's 0 comes back once, first seen at 2."""
    led = Ledger()
    seq = {
        ("a", 0): 1,
        ("a", 1): 2,
        ("a", 2): 3,
        ("b", 0): 1,
        ("c", 0): 1,
        ("c", 1): 2,
        ("d", 0): 5,
        ("d", 1): 4,
        ("e", 0): 1,
    }
    for (g, n), s in seq.items():
        led.record_sent((g, n), f"{g}{n}", f"{s:020d}", None)
    led.record_sent(("c", 0), "c0-again", f"{1:020d}", None)
    seen = [
        ("a", 0, 1),
        ("a", 2, 1),
        ("a", 1, 1),
        ("b", 0, 1),
        ("b", 0, 2),
        ("c", 0, 1),
        ("d", 0, 1),
        ("d", 1, 1),
        ("e", 0, 2),
    ]
    deliveries = [Seen(float(i), 0, (g, n), f"{g}{n}", rc, "") for i, (g, n, rc) in enumerate(seen)]
    led.record_seen(deliveries)
    for d in deliveries:
        if d.key != ("b", 0):
            led.record_processed(d)
    led.record_processed(deliveries[3])
    led.record_processed(deliveries[4])
    out = led.tally(left=[], seconds=0)
    assert (out.sent, out.processed, out.lost) == (9, 8, 1), out.line()
    assert (out.processed_twice, out.ids_per_dedup_over_one, out.groups_out_of_order) == (1, 1, 1), out.line()
    assert (out.sequence_out_of_order, out.redelivered, out.first_seen_redelivered) == (1, 1, 1), out.line()


def test_a_run_whose_visibility_ran_out_comes_back_in_order_and_only_that() -> None:
    """SQS redelivers a group's messages whose visibility ran out from the first of them, in order: the nemesis saw
    g's 0-2 answered after their visibility had passed and g's 0-3 redelivered by a receive that began meanwhile. That
    is order kept. Going back past a message not deleted (h), or delivering one deleted before the receive began (i),
    is not."""
    led = Ledger()
    for g, n in [("g", 0), ("g", 1), ("g", 2), ("g", 3), ("h", 0), ("h", 1), ("i", 0), ("i", 1)]:
        led.record_sent((g, n), f"{g}{n}", f"{n + 1:020d}", None)

    def seen(g: str, n: int, at: float, began: float, count: int) -> Seen:
        return Seen(at, n, (g, n), f"{g}{n}", count, "", began)

    first = [seen("g", n, 12.0, 0.0, 1) for n in range(3)]  # answered 12 s on: visibility (10 s) already passed
    again = [seen("g", n, 40.0, 2.0, 2) for n in range(3)] + [seen("g", 3, 40.0, 2.0, 1)]
    h = [seen("h", 0, 1.0, 0.0, 1), seen("h", 1, 1.0, 0.0, 1), seen("h", 1, 30.0, 20.0, 2)]  # h0 deleted at 50
    i = [seen("i", 0, 1.0, 0.0, 1), seen("i", 0, 30.0, 20.0, 2), seen("i", 1, 30.0, 20.0, 1)]  # i0 deleted at 2
    led.record_seen(first + again + h + i)
    for d in again:
        led.record_processed(d, 41.0)
    led.record_processed(h[0], 50.0)
    led.record_processed(h[2], 31.0)
    led.record_processed(i[0], 2.0)
    led.record_processed(i[2], 31.0)
    out = led.tally(left=[], seconds=0)
    assert (out.lost, out.processed_twice, out.redelivered) == (0, 0, 5), out.line()
    assert out.groups_out_of_order == 2, out.line()
    assert [e.split(" ")[0] for e in out.examples] == ["h", "i"], out.line()


def test_a_delete_refused_after_an_unanswered_attempt_may_have_landed_any_other_brings_the_message_back() -> None:
    """A nemesis run: a delete timed out at a frozen node, its retry came after the visibility ended and was refused as
    expired, and the message never came back: the first attempt's write had landed late. Such a message is not lost,
    whether it is never seen again (a) or is still in the queue at the end (b: that attempt did not land). A refusal
    with no unanswered attempt before it deleted nothing: the message must come back (d), or it is lost (c)."""
    led = Ledger()
    for g in "abcd":
        led.record_sent((g, 0), f"{g}0", f"{ord(g):020d}", None)
    first = [Seen(1.0, i, (g, 0), f"{g}0", 1, "", 0.0) for i, g in enumerate("abcd")]
    led.record_seen(first)
    for d in first:
        led.record_refused(d, unanswered_before=d.key[0] in "ab")
    again = Seen(20.0, 0, ("d", 0), "d0", 2, "", 15.0)
    led.record_seen([again])
    led.record_processed(again, 21.0)
    assert led.processed_keys() == {("a", 0), ("b", 0), ("d", 0)}
    out = led.tally(left=[("b", 0)], seconds=0)
    assert (out.lost, out.leftover, out.deleted_unanswered) == (1, 0, 1), out.line()
    assert (out.deletes_refused, out.processed, out.redelivered, out.processed_twice) == (4, 1, 1, 0), out.line()
