"""casque used as a library (``Casque.connect()`` in the host's own process) logs through the
standard library's ``logging``, under loggers named ``casque.*``, and prints nothing below WARNING
unless the host configured logging; ``casque`` commands keep their structlog lines (configure_logging).

Each case is a fresh Python process, as a host application would be: it connects with a contact
point where no node listens beside the suite's node, listens for wake hints (an info event), gets a
datagram that is not a hint (a debug event), and sends, receives and deletes three messages. Its
own stdout carries one JSON line of results; everything else on stdout or stderr came from logging.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Any

import pytest

from .conftest import ROOT

# No node listens here: the suite's node is 127.0.0.1, the test rings use 127.0.0.1-3 (devnode/spec.py).
DEAD_NODE = "127.0.0.9"

HOST = """
import asyncio, json, logging, socket, sys, uuid

HOW = sys.argv[1]
if HOW == "basicConfig DEBUG":
    logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s %(message)s")
elif HOW == "basicConfig INFO":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")

from daemon.base import metrics
from daemon.client import Casque
from tests.conftest import test_settings

if HOW == "casque command":  # what every casque command does first (base/terminal.py, settings_of)
    from daemon.base.logs import configure_logging

    configure_logging("debug", "json")


async def main() -> None:
    settings = test_settings()
    settings.cassandra.contact_points = [sys.argv[2], "127.0.0.1"]
    queue = "liblog_" + uuid.uuid4().hex[:10]
    async with await Casque.connect(settings) as cq:
        await cq.create_queue(queue)
        address = await cq.listen_for_hints([queue])  # logs hints_listening (info)
        host, port = address.rsplit(":", 1)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"not a hint", (host, int(port)))  # logs hint_rejected (debug)
        rejected = metrics.HINTS_REJECTED.labels("version")
        for _ in range(200):
            if rejected._value.get():
                break
            await asyncio.sleep(0.01)
        for i in range(3):
            await cq.send(queue, "t", {"i": i})
        received = []
        for _ in range(20):
            for d in await cq.receive(queue, max=10, wait=1):
                received.append(d.message.payload["i"])
                assert await cq.delete(d.receipt)
            if len(received) == 3:
                break
        await cq.admin.delete(queue)
    print(json.dumps({"received": sorted(received), "rejected": rejected._value.get()}))


asyncio.run(main())
"""

INFO_EVENT, DEBUG_EVENT = "hints_listening", "hint_rejected"


def run_host(how: str) -> tuple[dict[str, Any], list[str], str]:
    """(the host's result line, the rest of stdout, stderr) of one host process."""
    done = subprocess.run(
        [sys.executable, "-c", HOST, how, DEAD_NODE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ) | {"PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    *rest, result = done.stdout.splitlines()
    got = json.loads(result)
    assert got == {"received": [0, 1, 2], "rejected": 1}, got  # both events happened, the messages went through
    return got, rest, done.stderr


def test_no_node_listens_on_the_dead_contact_point() -> None:
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect((DEAD_NODE, 9042))


def test_a_host_that_configured_no_logging_sees_nothing_of_casque(settings: object) -> None:
    _, stdout, stderr = run_host("no logging")
    assert stdout == [] and stderr == ""


def test_a_host_with_logging_at_debug_gets_casques_events_as_records_of_casque_loggers(settings: object) -> None:
    _, stdout, stderr = run_host("basicConfig DEBUG")
    assert stdout == []
    records = {tuple(line.split(" ", 3)[:3]) for line in stderr.splitlines() if line.startswith(("DEBUG ", "INFO "))}
    assert {("INFO", "casque.hints", INFO_EVENT), ("DEBUG", "casque.hints", DEBUG_EVENT)} <= records, stderr
    rejected = next(line for line in stderr.splitlines() if f" {DEBUG_EVENT} " in line)
    assert "reason=version" in rejected and "sender=127.0.0.1" in rejected, rejected


def test_a_host_with_logging_at_info_gets_casques_info_but_not_its_debug(settings: object) -> None:
    _, stdout, stderr = run_host("basicConfig INFO")
    assert stdout == []
    assert f"INFO casque.hints {INFO_EVENT} address=" in stderr, stderr
    assert DEBUG_EVENT not in stderr and "DEBUG" not in stderr


def test_casque_commands_keep_their_structlog_lines(settings: object) -> None:
    """configure_logging (what every casque command calls) replaces the library set-up: structlog's
    JSON lines on stderr, at the configured level, as before."""
    _, stdout, stderr = run_host("casque command")
    assert stdout == []
    lines = [json.loads(line) for line in stderr.splitlines()]
    events = {(e["event"], e["level"]) for e in lines}
    assert {(INFO_EVENT, "info"), (DEBUG_EVENT, "debug")} <= events, events
    assert all("timestamp" in e for e in lines)
