"""``casque serve --workers N`` (daemon/http/workers.py): N server processes on one port (SO_REUSEPORT).

Connections land on either worker (the kernel picks); which worker holds a connection is read from /proc (the
server side of the connection's socket, by its ports). A message sent through one worker is received by a long poll
held by the other, and the wake hint reached that other worker (its own ``casque_hints_received``: each worker
serves its counters on ``metrics.port`` + its index). SIGTERM stops every worker; a worker killed with SIGKILL takes
the others down with a non-zero exit, so systemd restarts the unit.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from daemon.base.config import HintSettings
from daemon.testing import sqsserver

ACCOUNT = "000000000000"


class Conn:
    """One keep-alive connection speaking SQS's JSON protocol (so a test knows which socket a call used)."""

    def __init__(self, url: str) -> None:
        self.url = url
        host, port = url.removeprefix("http://").split(":")
        self.http = http.client.HTTPConnection(host, int(port), timeout=40)
        self.http.connect()
        assert self.http.sock is not None
        self.local_port: int = self.http.sock.getsockname()[1]

    def call(self, action: str, **params: Any) -> dict[str, Any]:
        headers = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{action}"}
        self.http.request("POST", "/", json.dumps(params), headers)
        r = self.http.getresponse()
        body = json.loads(r.read() or b"{}")
        assert r.status == 200, (action, r.status, body)
        return dict(body)


def socket_owner(local_port: int, remote_port: int | None) -> int:
    """The pid holding the TCP socket on 127.0.0.1 with ``local_port`` (and ``remote_port``, if given)."""
    inodes = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if int(local.split(":")[1], 16) == local_port and (
                remote_port is None or int(remote.split(":")[1], 16) == remote_port
            ):
                inodes.add(f"socket:[{inode}]")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in fds):
                return int(pid)
        except OSError:
            continue
    raise AssertionError(f"no process holds the socket on port {local_port} (remote {remote_port})")


def hints_received(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("casque_hints_received_total "):
                return float(line.split()[1])
    return 0.0


def two_free_ports() -> int:
    """A port free now, with the next one free too (worker 1 serves its metrics on metrics.port + 1)."""
    while True:
        port = sqsserver.free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue


@pytest.fixture
def workers(settings: Any) -> Iterator[tuple[sqsserver.SqsServer, int]]:
    metrics = two_free_ports()
    env = {"CASQUE_METRICS__ENABLED": "true", "CASQUE_METRICS__PORT": str(metrics)}
    srv = sqsserver.start(settings.cassandra.keyspace, "--workers", "2", env=env)
    yield srv, metrics
    srv.stop()


def test_a_send_through_one_worker_wakes_a_poll_held_by_the_other(
    workers: tuple[sqsserver.SqsServer, int], queue_name: str
) -> None:
    server, metrics_port = workers
    url = server.url
    server_port = int(url.rsplit(":", 1)[1])
    pids = {socket_owner(metrics_port + i, None): metrics_port + i for i in range(2)}
    assert len(pids) == 2 and server.proc.pid not in pids, "two workers, each with its own counters"
    by_worker: dict[int, Conn] = {}
    for _ in range(64):  # the kernel spreads connections over the workers: find one on each
        c = Conn(url)
        c.call("ListQueues")  # answered: a worker has accepted the connection (till then no process holds it)
        by_worker.setdefault(socket_owner(server_port, c.local_port), c)
        if len(by_worker) == 2:
            break
    assert set(by_worker) == set(pids), f"connections landed on {set(by_worker)}, the workers are {set(pids)}"
    (sender_pid, sender), (poller_pid, poller) = by_worker.items()
    queue_url = sender.call("CreateQueue", QueueName=queue_name)["QueueUrl"]
    hints_before = hints_received(pids[poller_pid])
    # A worker learns the other hint listeners at its first send and then every hints.refresh (1 s): one that
    # sent before its sibling registered (a move task resumed at start) hints it only from its next refresh. Each
    # round's message arrives either way (the due feed); the hint must come within two refreshes.
    deadline = time.monotonic() + 2 * HintSettings().refresh + 5.0
    for n in itertools.count():
        got: list[dict[str, Any]] = []
        poll = threading.Thread(
            target=lambda got=got: got.append(poller.call("ReceiveMessage", QueueUrl=queue_url, WaitTimeSeconds=20)),
            daemon=True,
        )
        poll.start()
        sender.call("SendMessage", QueueUrl=queue_url, MessageBody=f"across workers {n}")
        poll.join(30)
        assert got and [m["Body"] for m in got[0].get("Messages", [])] == [f"across workers {n}"]
        poller.call("DeleteMessage", QueueUrl=queue_url, ReceiptHandle=got[0]["Messages"][0]["ReceiptHandle"])
        if hints_received(pids[poller_pid]) > hints_before:
            break
        assert time.monotonic() < deadline, f"no hint reached the poll's worker in {n + 1} sends"


def test_sigterm_stops_every_worker_and_a_killed_worker_stops_the_rest(settings: Any) -> None:
    for fault in (signal.SIGTERM, signal.SIGKILL):
        srv = sqsserver.start(settings.cassandra.keyspace, "--workers", "2")
        worker_pids = _children(srv.proc.pid)
        assert len(worker_pids) == 2
        if fault == signal.SIGTERM:
            srv.signal(signal.SIGTERM)
            assert srv.proc.wait(30) == 0, srv.output()
        else:
            os.kill(min(worker_pids), signal.SIGKILL)
            assert srv.proc.wait(30) == 1, srv.output()
        srv.stop()
        assert not any(os.path.exists(f"/proc/{pid}") for pid in worker_pids), "every worker reaped"


def test_workers_out_of_range_is_refused_in_one_line(settings: Any) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "serve", "--port", "0", "--workers", "0"],
        capture_output=True,
        text=True,
        env=dict(os.environ, CASQUE_CASSANDRA__KEYSPACE=settings.cassandra.keyspace),
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["casque: invalid --workers 0: use 1-256 (about one per core)"]


def _children(pid: int) -> set[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return {int(p) for p in f.read().split()}
