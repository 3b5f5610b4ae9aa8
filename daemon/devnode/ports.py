"""Detect ports held by other processes *before* launching a JVM.

A Cassandra node that cannot bind its port dies after ~10 s of startup with a stack
trace; a bind attempt here takes microseconds and lets us name the port, the address and
the fix in one line.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

from .errors import PortInUseError
from .spec import NodeLayout

__all__ = ["PortNeed", "port_free", "node_ports", "check_ports"]


@dataclass(frozen=True)
class PortNeed:
    address: str
    port: int
    purpose: str


def port_free(address: str, port: int) -> bool:
    """True if a TCP listener could bind ``address:port`` right now.

    SO_REUSEADDR matches what the JVM does, so sockets lingering in TIME_WAIT from a node
    that just stopped don't count as busy, while any live listener (including one on
    0.0.0.0) does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            if exc.errno == errno.EADDRNOTAVAIL:
                raise PortInUseError(
                    f"casque: address {address} is not available on this machine (needed for "
                    f"port {port}); on Linux all of 127.0.0.0/8 is loopback -- on macOS add "
                    f"it with "
                    f"`sudo ifconfig lo0 alias {address}`",
                    address=address,
                    port=port,
                ) from exc
            raise
    return True


def node_ports(node: NodeLayout) -> list[PortNeed]:
    """Every TCP port a node binds: CQL and storage on its own address, JMX on 127.0.0.1."""
    return [
        PortNeed(node.address, node.native_port, "CQL native transport"),
        PortNeed(node.address, node.storage_port, "inter-node storage"),
        PortNeed("127.0.0.1", node.jmx_port, "JMX"),
    ]


def check_ports(node: NodeLayout) -> None:
    """Raise :class:`PortInUseError` for the first port of ``node`` that is already taken."""
    for need in node_ports(node):
        if not port_free(need.address, need.port):
            raise PortInUseError(
                f"casque: port {need.port} on {need.address} ({need.purpose} for "
                f"{node.name} of cluster '{node.spec.name}') is already in use by another process; "
                f"stop it (`ss -ltnp 'sport = :{need.port}'` shows which) or start on other ports "
                f"with --port/--storage-port/--jmx-port and a different --name",
                address=need.address,
                port=need.port,
            )
