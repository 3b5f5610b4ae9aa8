"""What the peers' runner (bench/peers.py) needs from one peer: ``PeerDriver`` (its worker command, a
sender, a pending count read from the broker), and the helpers every driver uses to name its versions
and binaries.
"""

from __future__ import annotations

import sys
from pathlib import Path


def _version(module: str) -> str:
    from importlib.metadata import version

    try:
        return version(module)
    except Exception:
        return "?"


class PeerDriver:
    """What the runner needs from one peer: its worker command, a sender, and a pending count."""

    name = ""
    senders = 4
    database = "redis"  # whose server's CPU the run counts: "redis" or "postgres"

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency

    def config(self) -> dict[str, str]:
        raise NotImplementedError

    def worker_cmd(self) -> list[str]:
        raise NotImplementedError

    def server_pids(self) -> list[int]:
        return []

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def reset(self) -> None: ...

    async def send(self, count: int, t: float) -> None:
        raise NotImplementedError

    async def pending(self) -> int:
        raise NotImplementedError


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)
