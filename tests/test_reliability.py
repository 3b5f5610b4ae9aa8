"""Faults, made to happen for real and counted (the `reliability` marker; reduced size in CI, the
full size runs as the soak in bench/soak.py). Every test asserts lost == 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.engine.client import Casque
from daemon.testing.chaos import kill_chaos, race

from .conftest import TEST_KEYSPACE

pytestmark = [pytest.mark.reliability, pytest.mark.slow]


async def test_kill_9_chaos_loses_nothing(cq: Casque, queue_name: str, tmp_path: Path) -> None:
    out = await kill_chaos(cq, queue_name, tmp_path, TEST_KEYSPACE, n=10_000, kills=5)
    print(out.line())
    assert out.kills == 5
    assert out.lost == 0
    assert out.same_attempt_twice == 0  # every duplicate is a later attempt: a timeout expired


async def test_contention_4_daemons_x_8_consumers_on_2_shards(cq: Casque, queue_name: str, tmp_path: Path) -> None:
    out = await race(cq, queue_name, tmp_path, TEST_KEYSPACE, n=10_000, offsets=[0, 0, 0, 0], consumers=8, shards=2)
    print(out.line())
    assert out.lost == 0
    assert out.duplicated == 0
    assert out.notes["lock_contention"] > 0  # the lock really was fought over


async def test_daemons_with_skewed_clocks_lose_and_duplicate_nothing(
    cq: Casque, queue_name: str, tmp_path: Path
) -> None:
    out = await race(cq, queue_name, tmp_path, TEST_KEYSPACE, n=10_000, offsets=[2000, -2000, 0], consumers=4, shards=4)
    print(out.line())
    assert out.lost == 0
    assert out.duplicated == 0
