"""The many-queues benchmark scenario (bench/many_queues.py) at a tiny size, end to end.

A real ``casque serve`` process, real HTTP clients, the real node: 400 tiny queues, 20 users
long-polling while producers send, the server killed with SIGKILL halfway and restarted, then
every queue drained. The ledger must show nothing lost, and the figures the report needs (CQL
reads per kind of request, the server's RSS against the queues it served) must exist. Timing is
not asserted here: speed belongs in bench/.
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
    assert by["empty_receive"]["requests"] >= mq.TEST.queues  # the drain looks at every queue
    assert result["reads"]["cql_reads"] > 0


async def test_rss_is_sampled_against_the_queues_touched(result: dict, tmp_path: Path) -> None:
    rss = result["rss"]
    assert rss["queues_touched"] == mq.TEST.queues  # the drain's sweep reaches every queue
    assert all(v is not None and v > 0 for v in rss["rss_mb_at"].values())
    assert {s["incarnation"] for s in rss["samples"]} == {1, 2}  # before and after the kill
    png = plots.rss_vs_queues(rss["samples"], tmp_path / "rss.png", "test")
    assert png.stat().st_size > 0
    result = dict(result, machine={}, engine="test", full_expected_min=1.0)
    text = report.section_many_queues(result, ".")
    assert "lost 0" in text and "bench-many-queues-rss.png" in text
