"""Advisory file locks that serialise work on shared on-disk state.

Two ``casque cassandra start`` calls (two terminals, parallel test workers) racing on
the same cluster would otherwise launch two JVMs on one data directory, and two
downloads would write into one cache directory. ``flock`` locks are released by the
kernel when the holder dies, so a killed process never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["locked"]


@contextmanager
def locked(directory: Path, name: str = ".lock") -> Iterator[None]:
    """Hold an exclusive lock on ``directory/name`` (created if needed) for the block."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / name).open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
