"""Doing one fault of the schedule, and the window it actually took (wall-clock seconds): from its first effect to
the moment the system had its part back (the node answering again, the process restarted), which the checker
explains duplicates and splits latencies by.

A partition cuts a node off from the other two on the ring's storage port (iptables on loopback, in a chain of its
own, flushed whatever happens); clients still reach it, so requests it coordinates wait for peers it can't reach."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

from cassandra import OperationTimedOut

from daemon.base.errors import StorageUnavailable, UsageError
from daemon.devnode import ClusterSpec
from daemon.engine.client import Casque
from daemon.testing.daemonproc import freeze

from .schedule import NODE_KINDS, Fault
from .system import System

SETTINGS_RETRY_S = 60.0
WHOLE_S = 180.0


@dataclass
class Window:
    fault: Fault
    start: float  # wall clock, s
    end: float
    note: str = ""
    pid: int = 0  # the daemon process a daemon fault ended

    def explains(self, pid: int, a: float, b: float) -> bool:
        """Whether this fault explains a delivery (by ``pid``, 0 for an SQS receive) in flight from ``a`` to ``b``
        being given again: its process was ended, or a node, a server or the queue's timeouts changed under it. A
        reshard explains nothing: moving no message, it has no reason to deliver one twice."""
        kind = self.fault.kind
        if kind == "reshard" or not self.covers(a, b):
            return False
        return kind not in ("daemon_kill", "daemon_skew") or pid == self.pid

    def covers(self, a: float, b: float) -> bool:
        """Whether the window overlaps [a, b]."""
        return self.start <= b and a <= self.end


def _iptables(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["iptables", *args], capture_output=True, text=True, check=False)


def chain(ring: ClusterSpec) -> str:
    """The iptables chain of ``ring``'s cuts: a ring's own, so two nemeses (the suite's, the bench's) never undo each
    other's."""
    return f"CASQUE_NEMESIS_{ring.storage_port}"


def partition_works(ring: ClusterSpec) -> str:
    """'' when this machine can cut loopback traffic with iptables (the ring's own chain made and hooked into INPUT),
    else why not."""
    name = chain(ring)
    if shutil.which("iptables") is None:
        return "no iptables on this machine (python -m bench setup installs it)"
    for args in (("-N", name), ("-F", name)):
        _iptables(*args)
    if _iptables("-C", "INPUT", "-j", name).returncode != 0:
        r = _iptables("-I", "INPUT", "-j", name)
        if r.returncode != 0:
            return f"iptables refused a chain in INPUT: {r.stderr.strip()}"
    return ""


def unhook_partition(ring: ClusterSpec) -> None:
    if shutil.which("iptables") is None:  # nothing was hooked (partition_works said why)
        return
    name = chain(ring)
    _iptables("-F", name)
    _iptables("-D", "INPUT", "-j", name)
    _iptables("-X", name)


def _cut(ring: ClusterSpec, node: int) -> None:
    """Drop the storage traffic between ``node`` and each other node, both ways (either end on the storage port)."""
    me = f"127.0.0.{node}"
    for peer in (f"127.0.0.{i}" for i in range(1, ring.nodes + 1) if i != node):
        for src, dst in ((me, peer), (peer, me)):
            rule = ["-s", src, "-d", dst, "-p", "tcp", "-m", "multiport", "--ports", str(ring.storage_port)]
            r = _iptables("-A", chain(ring), *rule, "-j", "DROP")
            if r.returncode != 0:
                raise RuntimeError(f"iptables: {r.stderr.strip()}")


async def _until_whole(system: System) -> str:
    """Wait (up to WHOLE_S) until every node sees every other up again: the fault lasts until then."""
    started = time.time()
    while not await asyncio.to_thread(system.whole):
        if time.time() - started > WHOLE_S:
            return f"ring not whole after {WHOLE_S:.0f}s"
        await asyncio.sleep(1)
    return f"ring whole {time.time() - started:.1f}s after"


async def _settings(f: Fault, cq: Casque, queue: str) -> str:
    """Change the queue's timeouts or layout as an operator would: a change that timed out (a node frozen or cut off
    under the LWT) is tried again until it is answered; a reshard that finds the layout already changed was the
    timed-out attempt's."""
    deadline = time.time() + SETTINGS_RETRY_S
    tries = 1
    while True:
        try:
            if f.kind == "queue_timeouts":
                await cq.admin.update(queue, timeout=f.arg / 1000, lock_ttl=f.arg2 / 1000)
                return f"{tries} tries"
            qs = await cq.admin.reshard(queue, shards=f.arg)
            return f"{tries} tries, draining {len(qs.draining)} layouts"
        except UsageError as exc:
            if f.kind == "reshard" and tries > 1 and "nothing to change" in str(exc):
                return f"{tries} tries, the timed-out one applied"
            raise
        except (StorageUnavailable, OperationTimedOut):  # the driver's own: Database.prepare lets it through
            if time.time() > deadline:
                raise
            tries += 1
            await asyncio.sleep(1)


async def apply(f: Fault, system: System, cq: Casque, queue: str) -> Window:
    """Do ``f`` and return its window once the system has its part back."""
    t0 = time.time()
    note, pid = "", 0
    if f.kind in ("daemon_kill", "daemon_skew"):
        d = system.daemons[f.target]
        pid = d.proc.pid if d is not None else 0
    if f.kind == "node_stop":
        pid = system.node_pid(f.target)
        freeze(pid)
        try:
            await asyncio.sleep(f.duration)
        finally:
            os.kill(pid, signal.SIGCONT)
    elif f.kind == "node_kill":
        await asyncio.to_thread(system.kill_node, f.target)
        await asyncio.sleep(f.duration)
        started = time.time()
        await asyncio.to_thread(system.start_node, f.target)
        note = f"restart took {time.time() - started:.1f}s"
    elif f.kind == "partition":
        await asyncio.to_thread(_cut, system.ring, f.target)
        try:
            await asyncio.sleep(f.duration)
        finally:
            await asyncio.to_thread(_iptables, "-F", chain(system.ring))
    elif f.kind == "daemon_kill":
        await asyncio.to_thread(system.kill_daemon, f.target)
        await asyncio.sleep(f.duration)
        system.start_daemon(f.target)
    elif f.kind == "server_kill":
        await asyncio.to_thread(system.kill_server, f.target)
        await asyncio.sleep(f.duration)
        await asyncio.to_thread(system.start_server, f.target)  # it waits for Cassandra itself
    elif f.kind == "daemon_skew":
        await asyncio.to_thread(system.stop_daemon, f.target)
        system.start_daemon(f.target, skew_ms=f.arg)
    elif f.kind in ("queue_timeouts", "reshard"):
        note = await _settings(f, cq, queue)
    else:
        raise ValueError(f"unknown fault kind {f.kind}")
    if f.kind in NODE_KINDS:
        note = (note + " " + await _until_whole(system)).strip()
    return Window(f, t0, time.time(), note, pid)
