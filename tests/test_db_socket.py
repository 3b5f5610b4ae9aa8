"""The connection to the node sends a request as soon as it is written (TCP_NODELAY), against the real node.

The driver writes a request in 4,096-byte pieces and leaves Nagle's algorithm on unless told: the rest of a
larger request (a take's batch, an ack's) waited for the node's delayed ACK of the first piece, 40 ms, and
every request behind it waited too (engine/storage/db.py ``SOCKOPTS``; measured in a drain of 20,000 messages:
22-44% of the take's requests waited 40-55 ms)."""

from __future__ import annotations

import socket
import statistics
import time

from daemon.engine.client import Casque

#: A request larger than the driver's 4,096-byte write piece and smaller than one loopback segment.
REQUEST_BYTES = 8000


async def test_every_connection_to_the_node_has_nagle_off(cq: Casque) -> None:
    assert cq.db.session is not None
    connections = [c for pool in cq.db.session.get_pools() for c in pool.get_connections()]
    assert connections, "the session holds a connection to the node"
    for c in connections:
        assert c._socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


async def test_a_request_larger_than_one_write_piece_does_not_wait_for_the_delayed_ack(cq: Casque) -> None:
    stmt = cq.db.prepare("SELECT release_version FROM system.local WHERE key = ?")
    key = "local" + "x" * REQUEST_BYTES
    took = []
    for _ in range(10):  # one at a time: no other answer from the node carries the ACK sooner
        t0 = time.perf_counter()
        assert await cq.db.run(stmt, [key]) == []
        took.append((time.perf_counter() - t0) * 1000.0)
    # With Nagle on, each one takes the node's delayed ACK (40 ms on Linux) and more: 43-45 ms measured, every time;
    # with it off, under 2 ms on a quiet box. The bound sits far from both.
    assert statistics.median(took) < 25.0, f"requests of {REQUEST_BYTES} bytes took {took} ms"
