"""A FIFO send stopped between its dedup claim and its write (issue 46's nemesis, seed 46), made to happen against the
real node with a real sender process: frozen there (``CASQUE_PAUSE_AT=fifo.claimed``: SIGSTOP to itself, a GC pause
or a frozen VM) and woken, or killed there (``CASQUE_CRASH_AT=fifo.claimed``: what kill -9 leaves) and its send
retried with its dedup id, as a client whose send failed does. Meanwhile a receive of another group moves the row's
cursor past the stopped send's position. The message is then written at that position, late: it must still come
first in its group, before the group's next message, sent after it was answered (docs/design.md, "FIFO queues").
And a send frozen after placing its message, before reserving the position (``CASQUE_PAUSE_AT=fifo.placed``): its
reservation comes too late to hold the cursor, and the send must place the message again.

This process's clock runs ahead of the sender's: by the time the sender was stopped (past the clock tolerance, with
no wait) while the sender stays frozen, or by what keeps the sender's clock within the tolerance when it goes on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from daemon.base.clock import Clock, ManualClock
from daemon.engine.client import Casque
from daemon.engine.consume.sweep import SWEEP_LAG_MS, Sweeper
from daemon.engine.storage.placement import id_due_ms
from daemon.testing.daemonproc import ROOT, stopped, wait_for

from .conftest import TEST_KEYSPACE

Pair = tuple[Casque, ManualClock]
FROZEN_MS = 10_000


def _sender(tmp_path: Path, queue: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """``casque send`` of group g's first message (dedup id "a") in a process of its own."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[cassandra]\nkeyspace = "{TEST_KEYSPACE}"\n')
    args = ["send", queue, "t", "--payload", '"a"', "--group", "g", "--dedup-id", "a"]
    return subprocess.Popen(
        [sys.executable, "-m", "daemon.cli", "-c", str(cfg), *args],
        cwd=ROOT,
        env=dict(os.environ) | env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def _drain(cq: Casque, queue: str) -> list[str]:
    """Receive and delete until a receive returns nothing: the payloads, in the order delivered."""
    out: list[str] = []
    while got := await cq.receive(queue, max=10, wait=0, visibility=60):
        out += [d.message.payload for d in got]
        assert all([await cq.delete(d.receipt) for d in got])
    return out


def _stopped(sender: subprocess.Popen[str]) -> int:
    """Wait for the sender to freeze itself at its ``CASQUE_PAUSE_AT`` step; the wall-clock time it was seen there."""
    wait_for(lambda: stopped(sender.pid) or sender.poll() is not None, 60, "the sender frozen at its step")
    assert sender.poll() is None, sender.communicate()
    return Clock().now_ms()


def _answer(sender: subprocess.Popen[str]) -> str:
    """Let the frozen sender go on: the id its send answered."""
    os.kill(sender.pid, signal.SIGCONT)
    out, err = sender.communicate(timeout=60)
    assert sender.returncode == 0, err
    return out.strip()


def _stop(sender: subprocess.Popen[str]) -> None:
    if sender.poll() is None:
        sender.send_signal(signal.SIGCONT)
        sender.kill()
        sender.wait(30)


async def _cursor_passes(cq: Casque, clock: ManualClock, q: str, at_ms: int) -> None:
    """At ``at_ms`` on this process's clock, another group's message is sent and received: its take moves the row's
    cursor to a clock tolerance before then, past what it did not see."""
    clock.advance(at_ms - clock.now_ms())
    await cq.send(q, "t", "x", group="other", dedup_id="x")
    assert await _drain(cq, q) == ["x"]


async def _group_g_in_order(cq: Casque, clock: ManualClock, q: str, answered: str) -> None:
    """Send group g's next message, "b" (after "a" was answered); receive everything, then once more after a
    sweep pass (the backstop that brings back what lay behind a cursor, late): "a" then "b", and nothing swept."""
    await cq.send(q, "t", "b", group="g", dedup_id="b")
    delivered = await _drain(cq, q)
    clock.advance(SWEEP_LAG_MS + 1000)
    swept = await Sweeper(cq.consumer(q)).sweep()
    delivered += await _drain(cq, q)
    print(f"answered={answered} delivered={delivered} swept={swept}")
    assert delivered == ["a", "b"], f"group g out of order or lost: sent a (answered {answered}) then b"
    assert swept == 0, "the message lay behind the cursor"


@pytest.mark.parametrize("fault", ["frozen", "killed"])
async def test_a_fifo_send_stopped_after_its_claim_comes_first_in_its_group(
    fault: str, manual: Pair, tmp_path: Path, queue_name: str
) -> None:
    """Stopped after its claim while the cursor passes its position, then woken or retried: "a" is written at its
    position, late, and still comes before "b", with nothing left for the sweep."""
    cq, clock = manual
    q = f"{queue_name}.fifo"
    await cq.create_queue(q, fifo=True)
    step = {"CASQUE_PAUSE_AT" if fault == "frozen" else "CASQUE_CRASH_AT": "fifo.claimed"}
    sender = _sender(tmp_path, q, step)
    try:
        if fault == "frozen":
            _stopped(sender)
        else:
            assert sender.wait(60) == 137, sender.communicate()  # CRASH_EXIT_CODE: killed after its claim
        await _cursor_passes(cq, clock, q, Clock().now_ms() + FROZEN_MS)  # FROZEN_MS after the sender stopped
        if fault == "frozen":  # woken: its send goes on, writes the message and answers
            answered = _answer(sender)
        else:  # its client sends it again with its dedup id: answered as the first send, written by the retry
            retried = await cq.send(q, "t", "a", group="g", dedup_id="a")
            assert retried.duplicate
            answered = str(retried)
    finally:
        _stop(sender)
    await _group_g_in_order(cq, clock, q, answered)


async def test_a_fifo_send_whose_reservation_comes_late_places_its_message_again(
    manual: Pair, tmp_path: Path, queue_name: str
) -> None:
    """Frozen after placing its message at ``p`` and before reserving it, past the write's time limit
    (``late_write_ms``); meanwhile a take moves the cursor past ``p``. Woken, its reservation lands behind the
    cursor: the send deletes it and places the message again, so "a" still comes before "b"."""
    cq, clock = manual
    q = f"{queue_name}.fifo"
    await cq.create_queue(q, fifo=True)
    late_ms = cq.stores.fifo.late_ms
    sender = _sender(tmp_path, q, {"CASQUE_PAUSE_AT": "fifo.placed"})
    try:
        seen = _stopped(sender)  # its position is at most this
        await _cursor_passes(cq, clock, q, seen + cq.stores.tolerance_ms + late_ms // 2)  # just past the position
        # the freeze lasts past the time limit and the cursor: placed again at the sender's now, it is ahead of it
        wait_for(lambda: Clock().now_ms() > seen + late_ms + late_ms // 2, 10, "the sender frozen past its limit")
        answered = _answer(sender)
    finally:
        _stop(sender)
    assert id_due_ms(uuid.UUID(answered)) > seen + late_ms, "not placed again: still at its position before the freeze"
    await _group_g_in_order(cq, clock, q, answered)
