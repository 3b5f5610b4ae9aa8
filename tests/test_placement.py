"""Placement is pure math: ids carry their due time, rows are never negative, and spread evenly."""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest

from daemon.engine.storage.placement import (
    bucket_of,
    compose_id,
    id_due_ms,
    key_shard,
    new_id,
    parse_id,
    placements,
    row_of,
    shard_of,
    unique_of,
)


def test_id_carries_its_due_time() -> None:
    for due in (0, 1, 1_700_000_000_123, (1 << 48) - 1):
        assert id_due_ms(new_id(due)) == due


def test_ids_are_version_7_layout_and_unique() -> None:
    ids = {new_id(1_700_000_000_000) for _ in range(10_000)}
    assert len(ids) == 10_000
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in ids)


def test_ids_of_one_due_millisecond_count_up_in_the_order_made() -> None:
    """The unique bits (the id without its placement bits) increase, whatever placement each id has: a row orders
    them as made (tests/test_sqs_order.py, a batch's messages through SQS)."""
    shared = placements(20, 32)[0]
    ids = [new_id(1_700_000_000_007, placement=shared if i % 2 else None) for i in range(20)]
    uniques = [i.int >> 32 for i in ids]
    assert uniques == sorted(uniques) and len(set(uniques)) == 20
    assert [shard_of(i, 1 << 16) for i in ids[1::2]] == [shard_of(ids[1], 1 << 16)] * 10


def test_unique_of_gives_back_the_unique_bits_an_id_was_composed_with() -> None:
    for unique in (0, 1, (1 << 30) - 1, 1 << 30, (1 << 42) - 1, 0x2AB_CDEF_0123):
        assert unique_of(compose_id(1_700_000_000_000, unique, 0xFFFF_FFFF)) == unique


def test_seeded_ids_are_deterministic() -> None:
    a = new_id(1_700_000_000_000, seed=b"digest:42|1700000000000")
    b = new_id(1_700_000_000_000, seed=b"digest:42|1700000000000")
    c = new_id(1_700_000_000_000, seed=b"digest:43|1700000000000")
    assert a == b and a != c


def test_shard_is_never_negative_even_for_ids_with_the_high_bit_set() -> None:
    rng = random.Random(7)
    for _ in range(20_000):
        mid = uuid.UUID(int=rng.getrandbits(128))
        for shards in (1, 3, 16, 1000):
            assert 0 <= shard_of(mid, shards) < shards


def test_bucket_is_never_negative_and_rolls_over() -> None:
    assert bucket_of(-5_000, 1000, 10) == 0
    assert bucket_of(0, 1000, 10) == 0
    assert bucket_of(9_999, 1000, 10) == 9
    assert bucket_of(10_000, 1000, 10) == 0
    for due in range(-10_000, 50_000, 777):
        assert 0 <= bucket_of(due, 1000, 10) < 10


def test_shards_spread_evenly() -> None:
    counts = Counter(shard_of(new_id(1_700_000_000_000), 16) for _ in range(32_000))
    assert set(counts) == set(range(16))
    assert max(counts.values()) < 1.15 * 2000 and min(counts.values()) > 0.85 * 2000


def test_messages_sent_together_share_rows_and_calls_still_spread_evenly() -> None:
    """A call's consecutive messages share a draw (one row, one write request, one take): 26 sent at
    once are one row, 100 are at most 4; over many calls every shard gets its share."""
    assert len({shard_of(new_id(1_700_000_000_000, placement=p), 16) for p in placements(26, 32)}) == 1
    assert len(set(placements(100, 32))) <= 4
    assert len(placements(100, 32)) == 100
    counts = Counter(
        shard_of(new_id(1_700_000_000_000, placement=p), 16) for _ in range(1_000) for p in placements(32, 32)
    )
    assert set(counts) == set(range(16))
    assert max(counts.values()) < 1.5 * 2000 and min(counts.values()) > 0.5 * 2000  # 1,000 draws of 32


def test_row_follows_from_the_id_alone() -> None:
    mid = new_id(1_700_000_123_456)
    assert row_of(mid, 60_000, 24, 16) == (bucket_of(1_700_000_123_456, 60_000, 24), shard_of(mid, 16))


def test_key_shard_is_stable_and_bounded() -> None:
    assert key_shard("digest:42") == key_shard("digest:42")
    assert all(0 <= key_shard(f"k{i}") < 16 for i in range(1000))


def test_parse_id_rejects_garbage_with_the_expected_form() -> None:
    with pytest.raises(ValueError, match="expected a UUID"):
        parse_id("not-an-id")
