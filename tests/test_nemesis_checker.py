"""The nemesis's checker (bench/nemesis/check.py) on ledgers made by hand: each violation it promises to find is
shown to it once, beside a clean ledger it must pass. A checker that can't fail proves nothing."""

from __future__ import annotations

from bench.nemesis.check import CRON_STALE_S, DaemonCheck, Findings
from bench.nemesis.faults import Window
from bench.nemesis.fifocheck import check_daemon_fifo
from bench.nemesis.ledger import Run, Send
from bench.nemesis.schedule import Fault
from bench.nemesis.traffic import FIFO_GROUPS

END = 1_000.0  # the traffic's end (wall s)


def sent(kind: str, n: int, mid: str, at: float = 100.0, v: int = 0, key: str = "", delay: float = 0.0) -> Send:
    return Send("q", kind, n, v, at, answered=at + 0.01, id=mid, due=at + delay, key=key)


def handled(mid: str, kind: str, n: int, at: float, attempt: int = 1, pid: int = 7, v: int = 0) -> list[Run]:
    label = f"{kind}:{n}:{v}"
    return [
        Run("nemesis.step", mid, attempt, pid, at, "start", label),
        Run("nemesis.step", mid, attempt, pid, at + 0.05, "end", label),
    ]


def ticks(key: str, upto: float) -> list[Run]:
    return [Run("nemesis.tick", f"t{n}", 1, 7, float(n), "tick", key, n) for n in range(1, int(upto) + 1, 5)]


def check(
    sends: list[Send], runs: list[Run], poisoned: frozenset[str] = frozenset(), windows: list[Window] | None = None
) -> Findings:
    f = Findings()
    DaemonCheck(sends, runs, set(poisoned), {}, windows or [], END).check(f)
    return f


def kinds(f: Findings) -> list[str]:
    return sorted(v.what for v in f.violations)


def test_a_clean_ledger_has_no_violation_and_no_duplicate() -> None:
    sends = [sent("plain", 0, "a"), sent("delayed", 0, "b", delay=5), sent("cron", 0, "c", key="cron-a")]
    runs = handled("a", "plain", 0, 100.2) + handled("b", "delayed", 0, 105.1) + ticks("cron-a", END)
    f = check(sends, runs)
    assert (kinds(f), f.duplicates, dict(f.lost)) == ([], [], {})


def test_a_message_answered_and_never_handled_is_lost() -> None:
    f = check([sent("plain", 0, "a"), sent("plain", 1, "b")], handled("a", "plain", 0, 100.2))
    assert kinds(f) == ["lost"] and f.lost == {"plain": 1}
    assert "plain:1:0 (b)" in f.violations[0].detail


def test_a_duplicate_is_explained_only_by_a_fault_that_could_end_its_first_delivery() -> None:
    runs = handled("a", "plain", 0, 100.0, attempt=1, pid=7) + handled("a", "plain", 0, 120.0, attempt=2, pid=8)
    alone = check([sent("plain", 0, "a")], runs)
    killed_it = Window(Fault(0, "daemon_kill", 0, 1), 101.0, 103.0, pid=7)
    killed_other = Window(Fault(0, "daemon_kill", 1, 1), 101.0, 103.0, pid=9)
    resharded = Window(Fault(0, "reshard", 0, 0, 8), 101.0, 101.1)
    assert [d.explained_by for d in alone.duplicates] == [""]
    assert [d.explained_by for d in check([sent("plain", 0, "a")], runs, windows=[killed_it]).duplicates] == [
        "daemon_kill"
    ]
    for w in (killed_other, resharded):
        assert [d.explained_by for d in check([sent("plain", 0, "a")], runs, windows=[w]).duplicates] == [""]


def test_the_same_attempt_twice_and_a_message_run_early_are_violations() -> None:
    twice = handled("a", "plain", 0, 100.2) + handled("a", "plain", 0, 130.0)
    assert kinds(check([sent("plain", 0, "a")], twice)) == ["same attempt twice"]
    early = handled("b", "delayed", 0, 101.0)  # due at 108: started 7 s before, past the skew's slack
    assert kinds(check([sent("delayed", 0, "b", delay=8)], early)) == ["ran early"]


def test_a_cron_fork_a_fault_began_explains_its_continuation_and_nothing_past_a_gap() -> None:
    """Occurrences 20-22 of a per-second schedule each run twice as first deliveries, from a node frozen at 19-20.5
    (only 20's first delivery meets the window); 25 runs twice too, after 23 and 24 ran once: not that fork."""
    cron = [sent("cron", 0, "c", key="cron-a")]
    one = [Run("nemesis.tick", f"t{n}", 1, 7, float(n), "tick", "cron-a", n) for n in range(1, int(END) + 1)]
    twice = [Run("nemesis.tick", f"t{n}", 1, 8, n + 0.5, "tick", "cron-a", n) for n in (20, 21, 22, 25)]
    frozen = Window(Fault(0, "node_stop", 1, 1.5), 19.0, 20.5)
    f = check(cron, one + twice, windows=[frozen])
    assert [(d.label, d.explained_by) for d in f.duplicates] == [
        ("cron-a#20", "node_stop"),
        ("cron-a#21", "node_stop"),
        ("cron-a#22", "node_stop"),
        ("cron-a#25", ""),
    ]
    redelivered = [Run("nemesis.tick", "t23", 2, 8, 23.5, "tick", "cron-a", 23)]  # not a fork: a redelivery
    f = check(cron, one + twice[:3] + redelivered, windows=[frozen])
    assert [(d.label, d.explained_by) for d in f.duplicates][2:] == [("cron-a#22", "node_stop"), ("cron-a#23", "")]


def test_replace_and_keep_broken_are_violations() -> None:
    one, two = sent("replace", 0, "r1", v=1, key="k", delay=8), sent("replace", 0, "r2", v=2, key="k", delay=8)
    ran_replaced = handled("r1", "replace", 0, 108.5, v=1) + handled("r2", "replace", 0, 108.5, v=2)
    assert kinds(check([one, two], ran_replaced)) == ["replace"]
    k1, k2 = sent("keep", 0, "k1", v=1, key="kk", delay=8), sent("keep", 0, "k2", v=2, key="kk", delay=8)
    assert kinds(check([k1, k2], handled("k1", "keep", 0, 108.5, v=1))) == ["keep"]


def test_poison_only_for_a_failing_handler_and_a_doomed_message_must_be_poisoned() -> None:
    assert kinds(check([sent("plain", 0, "a")], handled("a", "plain", 0, 100.2), poisoned=frozenset({"a"}))) == [
        "poisoned"
    ]
    f = check([sent("doomed", 0, "d")], [])
    assert kinds(f) == ["lost"] and f.lost == {"doomed (not poisoned)": 1}


def test_a_cron_that_stopped_firing_and_an_occurrence_fired_twice() -> None:
    cron = [sent("cron", 0, "c", key="cron-a")]
    assert kinds(check(cron, ticks("cron-a", END - CRON_STALE_S - 10))) == ["cron stopped"]
    twice = ticks("cron-a", END) + [Run("nemesis.tick", "t1b", 1, 8, 1.5, "tick", "cron-a", 1)]
    f = check(cron, twice)
    assert kinds(f) == [] and [(d.where, d.label, d.explained_by) for d in f.duplicates] == [("cron", "cron-a#1", "")]


def step(group: str, n: int, mid: str, start: float, end: float, pid: int = 7, ok: bool = True) -> Run:
    return Run("test.fifo_step", mid, 1, pid, start, "fifo" if ok else "fifo-fail", f"{group}:{n}", 0, end)


def fifo_sent(group: int, n: int, mid: str) -> Send:
    """Step ``n`` of group ``g<group>``, as the producer numbers them (bench/nemesis/traffic.py ``send_fifo``)."""
    return Send("f", "fifo", n * FIFO_GROUPS + group, 0, 100.0, answered=100.01, id=mid, key=f"g{group}")


def fifo_check(sends: list[Send], runs: list[Run]) -> Findings:
    f = Findings()
    check_daemon_fifo(f, sends, runs, [])
    return f


def test_a_daemon_fifo_group_run_in_order_one_at_a_time_is_clean() -> None:
    sends = [fifo_sent(0, 0, "s0"), fifo_sent(0, 1, "s1")]
    f = fifo_check(sends, [step("g0", 0, "s0", 101.0, 101.1), step("g0", 1, "s1", 101.2, 101.3)])
    assert (kinds(f), f.duplicates, dict(f.lost)) == ([], [], {})


def test_a_daemon_fifo_group_two_in_flight_out_of_order_lost_or_answered_twice_is_a_violation() -> None:
    sends = [fifo_sent(0, 0, "s0"), fifo_sent(0, 1, "s1")]
    overlap = [step("g0", 0, "s0", 101.0, 101.5), step("g0", 1, "s1", 101.2, 101.3)]
    assert kinds(fifo_check(sends, overlap)) == ["fifo in flight"]
    reordered = [step("g0", 1, "s1", 101.0, 101.1), step("g0", 0, "s0", 101.2, 101.3)]
    f = fifo_check(sends, reordered)
    assert kinds(f) == ["fifo order"] and f.counts["daemon fifo groups out of order"] == 1
    f = fifo_check(sends, [step("g0", 0, "s0", 101.0, 101.1)])
    assert kinds(f) == ["lost"] and f.lost == {"fifo": 1}
    twice = [fifo_sent(0, 0, "s0"), fifo_sent(0, 0, "s0b")]  # one dedup id, two message ids
    assert "fifo dedup" in kinds(fifo_check(twice, [step("g0", 0, "s0", 101.0, 101.1)]))


def test_a_doomed_send_that_failed_may_still_be_poisoned_but_only_once_per_failed_send() -> None:
    """A send that timed out may have been written (WriteTimeout): its message fails its attempts and is poisoned under
    an id the ledger never learnt (seed 46 had one)."""
    failed = Send("q", "doomed", 0, 0, 100.0, answered=102.0, error="StorageUnavailable: WriteTimeout")
    fails = [Run("test.always_fail", m, 1, 7, 103.0, "fail") for m in ("x", "y")]
    f = check([failed], fails[:1], poisoned=frozenset({"x"}))
    assert kinds(f) == [] and f.counts["doomed sends failed, written and poisoned"] == 1
    assert kinds(check([failed], fails, poisoned=frozenset({"x", "y"}))) == ["poisoned", "unsent"]
