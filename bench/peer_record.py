"""Imported by the peers' workers: notes each task's send→start latency, as bench/probe.py does
inside casque's daemon. Samples go to ``$BENCH_PEER_OUT/<pid>.txt`` (flushed every 2,000 and at
exit), one latency in milliseconds per line. A payload time ≤ 0 marks a warm-up task: not recorded."""

from __future__ import annotations

import atexit
import os
import threading
import time

OUT = os.environ.get("BENCH_PEER_OUT", "")
_buf: list[float] = []
_lock = threading.Lock()


def record(sent: float) -> None:
    now = time.time()
    if sent <= 0 or not OUT:
        return
    _buf.append((now - sent) * 1000.0)
    if len(_buf) >= 2000:
        flush()


def flush() -> None:
    global _buf
    with _lock:
        items, _buf = _buf, []
    if items and OUT:
        with open(os.path.join(OUT, f"{os.getpid()}.txt"), "a") as f:
            f.write("".join(f"{x:.3f}\n" for x in items))


atexit.register(flush)
