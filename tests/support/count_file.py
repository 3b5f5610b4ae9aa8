"""A count kept by a process under test, read by the test: a thread writes ``{"t": unix time, NAME: n, ...}`` to a
file every 50 ms (whole, then renamed), so a test reads a count taken after its last request
(tests/support/counted_serve.py, tests/support/message_reads.py)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path


def keep_writing(path: Path, counts: Callable[[], dict[str, int]]) -> None:
    """Start the writer thread (a daemon thread: it ends with the process)."""

    def loop() -> None:
        tmp = path.with_suffix(".tmp")
        while True:
            tmp.write_text(json.dumps({"t": time.time(), **counts()}))
            tmp.replace(path)
            time.sleep(0.05)

    threading.Thread(target=loop, name="count-file", daemon=True).start()


def read(path: Path, name: str, after: float) -> int:
    """The count ``name`` as written after unix time ``after``."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            data = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            data = {"t": 0}
        if data["t"] > after:
            return int(data[name])
        time.sleep(0.02)
    raise AssertionError(f"the process under test wrote no count after {after} to {path}")
