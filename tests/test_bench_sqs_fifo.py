"""The FIFO bench's pure parts (bench/fifo_ledger.py, bench/sqs_fifo.py, its table): a benchmark is
not a test, but the ledger that says whether a run lost, duplicated or reordered messages is, and
it must catch each fault it claims to count. No server here: the bench itself runs with ``python -m
bench --only sqs-fifo``.
"""

from __future__ import annotations

from collections import Counter

from bench import report, sqs_fifo
from bench.fifo_ledger import Delivery, Ledger, body_of, check, merge, parse_body


def stream(sender: int, group: str, n: int) -> list[str]:
    return [body_of(sender, group, k) for k in range(n)]


def test_body_names_its_stream_group_and_place() -> None:
    assert parse_body(body_of(3, "g7", 12)) == ("3:g7", "g7", 12)


def test_a_clean_run_is_clean() -> None:
    sent = stream(0, "g0", 5) + stream(1, "g0", 5) + stream(0, "g1", 3)
    # two senders' streams interleaved in one group, each in its own order; sequence numbers rising per group
    order = [
        sent[0],
        sent[5],
        sent[1],
        sent[6],
        sent[10],
        sent[2],
        sent[3],
        sent[7],
        sent[8],
        sent[11],
        sent[4],
        sent[9],
        sent[12],
    ]
    seq = Counter[str]()
    deliveries = []
    for body in order:
        _, group, _ = parse_body(body)
        seq[group] += 1
        deliveries.append(Delivery(body, group, str(seq[group])))
    led = check(sent, deliveries)
    assert led.clean
    assert (led.as_dict() | {"sent": 0, "received": 0, "without_sequence": 0}) == Ledger().as_dict()
    assert (led.sent, led.received) == (13, 13)


def test_a_message_never_received_is_lost() -> None:
    sent = stream(0, "g0", 4)
    led = check(sent, [Delivery(b) for b in sent[:3]])
    assert (led.lost, led.received, led.clean) == (1, 3, False)


def test_a_second_delivery_is_a_duplicate_not_an_order_fault() -> None:
    sent = stream(0, "g0", 3)
    led = check(sent, [Delivery(sent[0]), Delivery(sent[1]), Delivery(sent[0]), Delivery(sent[2])])
    assert (led.duplicates, led.out_of_order, led.lost) == (1, 0, 0)


def test_a_stream_delivered_out_of_its_send_order_is_caught() -> None:
    sent = stream(0, "g0", 4)
    led = check(sent, [Delivery(sent[0]), Delivery(sent[2]), Delivery(sent[1]), Delivery(sent[3])])
    assert (led.stream_order, led.out_of_order, led.lost, led.duplicates) == (1, 1, 0, 0)


def test_other_groups_may_interleave_freely() -> None:
    a, b = stream(0, "g0", 3), stream(0, "g1", 3)
    led = check(a + b, [Delivery(x) for x in (b[0], a[0], b[1], b[2], a[1], a[2])])
    assert led.clean


def test_a_group_delivered_against_its_sequence_numbers_is_caught() -> None:
    # two senders in one group: each stream in order, but the server's SequenceNumbers go backwards
    x, y = body_of(0, "g0", 0), body_of(1, "g0", 0)
    led = check([x, y], [Delivery(x, "g0", "20"), Delivery(y, "g0", "10")])
    assert (led.stream_order, led.sequence_order, led.out_of_order) == (0, 1, 1)


def test_a_delivery_breaking_both_rules_counts_once() -> None:
    sent = stream(0, "g0", 2)
    led = check(sent, [Delivery(sent[1], "g0", "2"), Delivery(sent[0], "g0", "1")])
    assert (led.stream_order, led.sequence_order, led.out_of_order) == (1, 1, 1)


def test_without_sequence_numbers_only_the_stream_order_is_judged_and_that_is_said() -> None:
    sent = stream(0, "g0", 2)
    led = check(sent, [Delivery(b, "g0") for b in sent])
    assert (led.without_sequence, led.clean) == (2, True)


def test_wrong_group_and_unknown_messages_are_counted() -> None:
    sent = stream(0, "g0", 1)
    led = check(sent, [Delivery(sent[0], "g9"), Delivery("not-ours")])
    assert (led.wrong_group, led.unknown, led.clean) == (1, 1, False)


def test_merge_sums_every_round() -> None:
    total = merge([Ledger(sent=10, lost=1), Ledger(sent=10, duplicates=2, retries=1)])
    assert (total.sent, total.lost, total.duplicates, total.retries) == (20, 1, 2, 1)


def _senders_by_group(groups: int) -> dict[str, set[int]]:
    size = sqs_fifo.FULL
    out: dict[str, set[int]] = {}
    for w in range(size.senders):
        for j in range(size.messages // size.senders):
            out.setdefault(sqs_fifo.group_of(w, j, groups, size.senders), set()).add(w)
    return out


def test_with_many_groups_every_group_gets_messages_from_one_sender() -> None:
    """Then the client knows each group's whole order: the stream check covers every message."""
    for groups in (10, 1000):
        by_group = _senders_by_group(groups)
        assert len(by_group) == groups
        assert all(len(senders) == 1 for senders in by_group.values())


def test_with_one_group_every_sender_shares_it() -> None:
    assert _senders_by_group(1) == {"g0": set(range(sqs_fifo.FULL.senders))}


def test_a_sender_cycles_its_groups_so_streams_have_several_messages() -> None:
    mine = [sqs_fifo.group_of(3, j, 1000, 8) for j in range(250)]
    assert len(set(mine)) == 125 and mine[0] == mine[125] == "g3"


def test_high_throughput_scenario_asks_for_sqs_high_throughput_attributes() -> None:
    ht = [sc for sc in sqs_fifo.SCENARIOS if sc.high_throughput]
    assert [sc.groups for sc in ht] == [1000]
    assert ht[0].attributes() == {
        "FifoQueue": "true",
        "DeduplicationScope": "messageGroup",
        "FifoThroughputLimit": "perMessageGroupId",
    }
    assert sorted(sc.groups for sc in sqs_fifo.SCENARIOS if not sc.high_throughput) == [1, 10, 1000]


def test_systems_alternate_which_goes_first() -> None:
    assert [sqs_fifo._order(["casque", "elasticmq"], step) for step in range(3)] == [
        ["casque", "elasticmq"],
        ["elasticmq", "casque"],
        ["casque", "elasticmq"],
    ]


def _results(casque: dict[str, object]) -> dict[str, object]:
    runs = []
    for sc in sqs_fifo.SCENARIOS:
        runs.append(
            {
                "system": "elasticmq",
                "scenario": sc.key,
                "round": 1,
                "send_per_s": 400.0,
                "receive_delete_per_s": 200.0,
                "ledger": Ledger(sent=100, received=100).as_dict(),
            }
        )
        runs.append({"system": "casque", "scenario": sc.key, "round": 1, **casque})
    return {
        "size": {"name": "quick", "messages": 100, "rounds": 1, "senders": 8, "receivers": 8, "idle_s": 20.0},
        "systems": ["casque", "elasticmq"],
        "labels": {k: v[0] for k, v in sqs_fifo.SYSTEMS.items()},
        "scenarios": [{"key": sc.key, "label": sc.label} for sc in sqs_fifo.SCENARIOS],
        "runs": runs,
        "summary": sqs_fifo.summarize(runs),
    }


def test_table_gives_the_ratio_and_shows_a_lossy_run_in_bold() -> None:
    R = _results(
        {"send_per_s": 200.0, "receive_delete_per_s": 300.0, "ledger": Ledger(sent=100, received=99, lost=1).as_dict()}
    )
    table = report.sqs_fifo_table(R)
    assert "| send, 1 group | 200 | 400 | 0.50× |" in table
    assert (
        "| receive+delete, 1 group | 300 | 200 | 1.50× | **lost 1, dup 0, out of order 0** | lost 0, dup 0, out of "
        "order 0 |"
    ) in table


def test_a_failed_system_is_named_failed_with_its_error() -> None:
    R = _results({"error": "ClientError: UnsupportedOperation", "ledger": Ledger().as_dict()})
    assert "| send, 10 groups | **failed** | 400 | – |" in report.sqs_fifo_table(R)
    assert "casque serve, 10 groups: ClientError: UnsupportedOperation" in report.section_sqs_fifo(R, ".")
