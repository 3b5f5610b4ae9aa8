"""A conditional write (LWT) is never sent again by the driver, whatever it was told (engine/storage/db.py,
``ConditionalWritesNotResent``), against the statements the engine really prepares on a real node.

The driver's own policy re-sends a request on the next host after a broken connection, a node's error answer or an
Unavailable. An LWT may have applied all the same (Paxos answers Unavailable when its commit finds a replica down
after a quorum accepted); the re-sent one answers "not applied" and shows the sender's own row: a FIFO send read its
own dedup claim as a duplicate's, deleted its message's reservation, and wrote the message under that tombstone
(lost, the client told it was sent). The nemesis (bench/nemesis) lost FIFO messages this way after a broken
connection; a later loss fits the same path through an Unavailable (not confirmed: a re-send that succeeds logs
nothing). Raised instead, the outcome is unknown to the caller, as after an LWT's write timeout,
which every LWT's caller handles (tests/test_fifo_send_faults.py)."""

from __future__ import annotations

from cassandra import ConsistencyLevel, WriteType
from cassandra.connection import ConnectionException
from cassandra.policies import RetryPolicy

from daemon.engine.client import Casque
from daemon.engine.storage.db import ConditionalWritesNotResent, is_conditional


def _decisions(cq: Casque, stmt: object) -> set[int]:
    """What the session's policy answers for ``stmt`` to each failure the driver asks it about."""
    policy = cq.db.session.cluster.profile_manager.default.retry_policy  # type: ignore[union-attr]
    assert isinstance(policy, ConditionalWritesNotResent)
    q = stmt.bind([None] * len(stmt.column_metadata))  # type: ignore[attr-defined]
    quorum = ConsistencyLevel.QUORUM
    answers = [  # called as the driver calls them (cassandra/cluster.py): a node's answer comes by keyword
        policy.on_request_error(q, quorum, ConnectionException("reset by peer"), 0),
        policy.on_unavailable(q, retry_num=0, consistency=quorum, required_replicas=2, alive_replicas=1),
        policy.on_read_timeout(
            q, retry_num=0, consistency=quorum, received_responses=2, required_responses=2, data_retrieved=False
        ),
        policy.on_write_timeout(
            q,
            retry_num=0,
            consistency=quorum,
            received_responses=1,
            required_responses=2,
            write_type=WriteType.BATCH_LOG,
        ),
    ]
    return {int(decision) for decision, _ in answers}


async def test_the_engines_conditional_writes_are_not_resent_and_plain_ones_are(cq: Casque) -> None:
    st = cq.stores
    conditional = [
        st.fifo._claim,  # the FIFO dedup claim: the one the nemesis lost a message through
        st.fifo._redirect,
        st.keys._claim,
        st.keys._repoint,
        st.keys._release,
        st.lease("lwt-resend", "me", 5)._claim,
    ]
    plain = [st.fifo._read_claim, st.fifo._written, st.keys._get]
    for stmt in conditional:
        assert is_conditional(stmt), stmt.query_string
        assert _decisions(cq, stmt) == {RetryPolicy.RETHROW}, stmt.query_string
    for stmt in plain:  # the driver's own answers: the next host after an error or Unavailable, the same host after
        assert not is_conditional(stmt), stmt.query_string  # a read timeout with every answer but no data, or a
        assert _decisions(cq, stmt) == {RetryPolicy.RETRY_NEXT_HOST, RetryPolicy.RETRY}, stmt.query_string  # batch log


async def test_every_conditional_write_the_engine_prepares_is_recognised(cq: Casque) -> None:
    """Any prepared statement with an IF clause (an LWT) is one the policy keeps from a re-send."""
    prepared = list(cq.db._prepared.values())
    lwts = [s for s in prepared if " IF " in s.query_string.upper() and "CREATE" not in s.query_string.upper()]
    assert len(lwts) >= 5, [s.query_string for s in lwts]
    assert all(is_conditional(s) for s in lwts)
