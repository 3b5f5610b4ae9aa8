"""The many-queues benchmark scenario (bench/many_queues.py) at a tiny size, end to end.

A real ``casque serve`` process, real HTTP clients, the real node: 400 tiny queues, 20 users
long-polling while producers send, the server killed with SIGKILL halfway and restarted, the
noisy-neighbour phase (one user's backlog drained while another gets single messages), then every
queue drained and the node's reads counted over an idle window. The ledger must show nothing
lost, and the figures the report needs (CQL reads per kind of request, the server's RSS against
the queues it served, the node's reads while idle) must exist. Speed belongs in bench/: the one
timing asserted is a ratio within the run (B's send→receive over A's drain against B's own quiet
figure), whose bound the noisy-neighbour test justifies.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import many_queues as mq
from bench import plots, report
from daemon.base.config import Settings

pytestmark = [pytest.mark.slow, pytest.mark.reliability]


@pytest.fixture(scope="module")
async def result(settings: Settings) -> dict:
    return await mq.scenario(mq.TEST, keyspace=settings.cassandra.keyspace, measure_table=False)


async def test_nothing_lost_through_a_kill_9_of_the_server(result: dict) -> None:
    ledger = result["ledger"]
    assert result["kill"]["done"], "the server was not killed"
    assert ledger["sent"] >= mq.TEST.messages
    assert ledger["lost"] == 0, f"lost: {ledger['lost_sample']}"
    assert ledger["deleted"] == ledger["sent"]
    assert ledger["received_not_sent"] == 0 and ledger["unknown_bodies"] == 0


async def test_reads_per_request_are_counted_in_the_server(result: dict) -> None:
    by = result["reads"]["by_kind"]
    for kind in ("receive", "empty_receive", "send", "delete"):
        assert by[kind]["requests"] > 0, kind
        assert by[kind]["cql_per_request"] is not None and by[kind]["cql_per_request"] > 0, kind
    # the drain looks at every idle queue of the sample and every queue it checks empty, once at least
    assert by["empty_receive"]["requests"] >= result["drain"]["swept_idle"] + result["drain"]["checked"]
    assert result["reads"]["cql_reads"] > 0


async def test_rss_is_sampled_against_the_queues_touched(result: dict, tmp_path: Path) -> None:
    rss = result["rss"]
    # the drain's sweep reaches every queue (at this size the samples of idle queues and of queues already
    # drained cover all of them), and the noisy-neighbour phase's two queues
    assert rss["queues_touched"] == mq.TEST.queues + len(result["noisy"]["queues"])
    assert all(v is not None and v > 0 for v in rss["rss_mb_at"].values())
    assert {s["incarnation"] for s in rss["samples"]} == {1, 2}  # before and after the kill
    png = plots.rss_vs_queues(rss["samples"], tmp_path / "rss.png", "test")
    assert png.stat().st_size > 0
    result = dict(result, machine={}, engine="test", full_expected_min=1.0)
    text = report.section_many_queues(result, ".")
    assert "lost 0" in text and "bench-many-queues-rss.png" in text


async def test_one_users_backlog_does_not_delay_anothers_single_message(result: dict) -> None:
    """User A drains a backlog (5,000 at this size) from A's queue while user B, long-polling B's own queue on
    the same server, gets single messages; B's send→receive over A's drain is held against the same figure
    with A's queue empty, measured minutes before in the same run.

    The bound: B's median no more than 5 × its quiet median, or the quiet median + 250 ms, whichever is
    larger (A's four receivers share the server's CPU and the node with B: on this 2-core box that costs B
    some ms, which is not what is asked; the 250 ms absorbs a shared machine's scheduling). Had B's message
    waited behind A's backlog, it would have arrived when the backlog left at its send was drained: that
    wait (``behind``, from each probe's backlog and A's drain rate) is asserted to be at least twice the
    bound first, so this test fails if fairness between queues fails, not only if the box is slow."""
    N = result["noisy"]
    quiet, noisy, behind = N["quiet"], N["noisy"], N["behind"]
    assert quiet["missed"] == 0 and noisy["missed"] == 0, "B's owner missed a message"
    assert N["a_left_after_drain"] == 0, "A's backlog was not drained"
    # each message to B is waited for before the next: one held behind A's backlog leaves few sent during the drain
    assert noisy["count"] >= mq.TEST.noisy_probes // 2, f"only {noisy['count']} messages to B during A's drain"
    bound = max(5 * quiet["p50_ms"], quiet["p50_ms"] + 250)
    assert behind["p50_ms"] >= 2 * bound, f"A's drain too short to tell: {behind['p50_ms']:.0f} ms behind it"
    assert noisy["p50_ms"] <= bound, f"B's p50 {noisy['p50_ms']:.0f} ms over A's drain, {quiet['p50_ms']:.0f} quiet"
    assert noisy["p99_ms"] < behind["p50_ms"], f"B's p99 {noisy['p99_ms']:.0f} ms: as slow as waiting behind A"


async def test_reads_while_the_queues_sit_idle_are_counted_on_the_node_and_in_the_server(result: dict) -> None:
    idle = result["idle"]
    assert idle["seconds"] >= mq.TEST.idle_s
    assert idle["node_reads_per_s"] is not None and idle["node_reads_per_s"] >= 0
    assert idle["server_cql_reads_per_s"] is not None and idle["server_cql_reads_per_s"] >= 0
    assert sum(idle["by_table"].values()) == idle["node_reads"]


async def test_the_drain_visits_the_busy_queues_and_a_sample_of_idle_ones(result: dict) -> None:
    d = result["drain"]
    assert d["swept"] == d["swept_busy"] + d["checked"] + d["swept_idle"]
    assert 0 < d["swept_idle"] <= mq.TEST.idle_sample and 0 < d["checked"] <= mq.TEST.idle_sample
    assert d["swept_busy"] > 0  # the fill left messages the owners never took
    assert result["ledger"]["lost"] == 0
