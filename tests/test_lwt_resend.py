"""A conditional write (LWT) whose connection broke is never sent again by the driver (engine/storage/db.py,
``ConditionalWritesNotResent``), against the statements the engine really prepares on a real node.

The driver's own policy re-sends a request on the next host after a connection error or a node's error
answer. For an LWT that had applied, the re-sent one answers "not applied" and shows the sender's own row:
a FIFO send read its own dedup claim as a duplicate's, deleted its message's reservation, and wrote the
message under that tombstone (lost, the client told it was sent). The nemesis (bench/nemesis) met it once
in an hour: a server killed while a node was down. Raised instead, the outcome is unknown to the caller, as
after an LWT's write timeout, which every LWT's caller handles (tests/test_fifo_send_faults.py)."""

from __future__ import annotations

from cassandra.connection import ConnectionException
from cassandra.policies import RetryPolicy

from daemon.engine.client import Casque
from daemon.engine.storage.db import ConditionalWritesNotResent, is_conditional


def _decision(cq: Casque, stmt: object) -> int:
    policy = cq.db.session.cluster.profile_manager.default.retry_policy  # type: ignore[union-attr]
    assert isinstance(policy, ConditionalWritesNotResent)
    bound = stmt.bind([None] * len(stmt.column_metadata))  # type: ignore[attr-defined]
    decision, _ = policy.on_request_error(bound, None, ConnectionException("reset by peer"), 0)
    return int(decision)


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
        assert _decision(cq, stmt) == RetryPolicy.RETHROW, stmt.query_string
    for stmt in plain:
        assert not is_conditional(stmt), stmt.query_string
        assert _decision(cq, stmt) == RetryPolicy.RETRY_NEXT_HOST, stmt.query_string


async def test_every_conditional_write_the_engine_prepares_is_recognised(cq: Casque) -> None:
    """Any prepared statement with an IF clause (an LWT) is one the policy keeps from a re-send."""
    prepared = list(cq.db._prepared.values())
    lwts = [s for s in prepared if " IF " in s.query_string.upper() and "CREATE" not in s.query_string.upper()]
    assert len(lwts) >= 5, [s.query_string for s in lwts]
    assert all(is_conditional(s) for s in lwts)
