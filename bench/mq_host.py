"""Small helpers of the many-queues scenario (bench/many_queues.py) that touch the machine: ports, the
file-descriptor limit, a process's RSS, bounded concurrency and the ``queues`` table's size on disk.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import resource
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from .env import ROOT


def settings_for(keyspace: str) -> Any:
    """The project's settings without this shell's CASQUE_* overrides, pointed at ``keyspace``, whose schema
    is applied (idempotent): what every phase and probe of the scenario connects with."""
    from daemon.base.config import load_settings
    from daemon.engine.storage.schema import ensure_schema

    settings = load_settings(env={k: v for k, v in os.environ.items() if not k.startswith("CASQUE_")})
    settings.cassandra.keyspace = keyspace
    ensure_schema(settings)
    return settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def pct(samples: list[float], q: float) -> float | None:
    if not samples:
        return None
    s = sorted(samples)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


def zipf_cum(n: int, s: float) -> list[float]:
    return list(itertools.accumulate(1.0 / (r**s) for r in range(1, n + 1)))


def raise_fd_limit(need: int) -> None:
    """Open files for one connection per user, in this process and in the server it starts (a child
    inherits the limit): the soft limit up to the hard one, and past it where the process may (root, or
    CAP_SYS_RESOURCE: the full size's 20,000 users need about 2 × 20,000 where a box's default is 20,000)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need <= hard or (soft < hard and need > hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < need:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))
        except (ValueError, OSError):
            pass  # not allowed: said below
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft < need:
        raise SystemExit(
            f"bench: {need} open files needed (one connection per user) but the limit is {soft}: raise it (ulimit -n "
            f"{need * 2})"
        )


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


async def bounded(items: Iterable[Any], concurrency: int, one: Callable[[Any], Awaitable[object]]) -> None:
    it = iter(items)

    async def worker() -> None:
        for item in it:
            await one(item)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


#: the tables a queue's creation writes a row to (QueueStore.create): the queue's share of the disk
CREATE_TABLES = ("queues", "queue_names", "queue_expiry")


def table_stats(keyspace: str, table: str = "queues") -> dict[str, int]:
    """One table after a flush: bytes on disk (live) and the partition estimate."""
    casque = [sys.executable, "-m", "daemon.cli", "cassandra", "nodetool"]
    subprocess.run(casque + ["flush", keyspace, table], cwd=ROOT, capture_output=True, timeout=300)
    out = subprocess.run(
        casque + ["tablestats", f"{keyspace}.{table}"], cwd=ROOT, capture_output=True, text=True, timeout=300
    ).stdout
    found: dict[str, int] = {}
    for key, label in (("bytes", "Space used (live)"), ("partitions", "Number of partitions (estimate)")):
        m = re.search(rf"{re.escape(label)}: (\d+)", out)
        if m:
            found[key] = int(m.group(1))
    return found


def create_tables_bytes(keyspace: str) -> dict[str, int]:
    """Bytes on disk of each table a creation writes to (after a flush of each)."""
    return {t: table_stats(keyspace, t).get("bytes", 0) for t in CREATE_TABLES}
