"""Loaded INTO the casque daemon under test (``worker.handler_modules = ["bench.probe"]``).

The daemon is the real one (``casque -c FILE run``); this module only adds what a benchmark must
see from inside it:

* the ``bench.noop`` handler, which does nothing but note when it started: send→start latency
  (the payload carries the sender's wall-clock time ``t``) and lateness against the due time
  (or a schedule's fire time);
* an ack counter around ``Acker.ack`` (the moment acks are *written*), which stops the daemon
  with its own graceful SIGTERM once ``BENCH_PROBE_EXPECT`` messages are acked;
* the CQL counter (bench/cqlcount.py): statements through ``Database.run``, and every request
  frame the driver sends; with ``BENCH_PROBE_LIVE=1`` the running totals in ``<out>.cql`` every
  0.2 s, so the bench can count over a window of its choosing (bench/idle.py);
* with ``BENCH_PROBE_TAKES=1``, the round trips of every take (bench/taketrace.py);
* with ``BENCH_PROBE_ROWS=1``, for every message whose lateness is measured, the row it came from
  and when it started, so a late stretch can be told apart: one row that stood still, or all;
* at exit, one JSON file (``BENCH_PROBE_OUT``) with all of it and the process's CPU time.
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from daemon import Context, Delivery, Handler, Middleware, register, use

from . import cqlcount, taketrace

LIVE = os.environ.get("BENCH_PROBE_LIVE", "0") == "1"
TAKES = os.environ.get("BENCH_PROBE_TAKES", "0") == "1"
ROWS = os.environ.get("BENCH_PROBE_ROWS", "0") == "1"
EXPECT = int(os.environ.get("BENCH_PROBE_EXPECT", "0") or 0)
CONCURRENCY = int(os.environ.get("BENCH_PROBE_CONCURRENCY", "0") or 0) or None  # handlers running at once
OUT = os.environ.get("BENCH_PROBE_OUT", "")
TASK = "bench.noop"

_send_ms: list[float] = []
_late_ms: dict[str, list[float]] = {}
_late_rows: dict[str, list[tuple[float, int, int, int]]] = {}  # kind -> (start, due_ms, bucket, shard)
_state: dict[str, Any] = {
    "acked": 0,
    "first_ack": 0.0,
    "last_ack": 0.0,
    "first_start": 0.0,
    "last_start": 0.0,
    "stopped": False,
    "wall0": time.time(),
    "cpu0": time.process_time(),
}


@register(TASK, concurrency=CONCURRENCY)
class Noop(Handler):
    """A no-op task. Measures only: it returns at once, so the message is acked."""

    async def handle(self, ctx: Context, payload: Any) -> None:
        now = time.time()
        if not _state["first_start"]:
            _state["first_start"] = now
        _state["last_start"] = now
        if isinstance(payload, dict):
            sent = payload.get("t")
            if sent is not None and float(sent) > 0:  # 0: a warm-up message (bench/casque_run.py warm_up)
                _send_ms.append((now - float(sent)) * 1000.0)
            kind = payload.get("k")
            if kind:
                due = ctx.fire_time or ctx.due
                _late_ms.setdefault(kind, []).append((now - due.timestamp()) * 1000.0)


class RowOfLate(Middleware):
    """Notes the row (bucket, shard) of each message whose lateness the handler measures.

    A hook, not the handler, because only hooks see the message's row; ``before`` runs just
    before the handler, so its clock reading is the handler's start to within microseconds."""

    def before(self, d: Delivery) -> None:
        payload = d.message.payload
        kind = payload.get("k") if isinstance(payload, dict) else None
        if kind and d.ctx is not None:
            due = d.ctx.fire_time or d.ctx.due
            row = (time.time(), int(due.timestamp() * 1000), d.message.bucket, d.message.shard)
            _late_rows.setdefault(kind, []).append(row)


def _install_ack_counter() -> None:
    from daemon.engine.delivery import acks

    original: Callable[..., Awaitable[Any]] = acks.Acker.ack  # wrapped as it is, whatever it returns
    if getattr(original, "_bench_counted", False):
        return

    async def ack(self: Any, messages: Any, *args: Any, **kwargs: Any) -> Any:
        result = await original(self, messages, *args, **kwargs)
        now = time.time()
        n = sum(1 for m in messages if getattr(m, "task", "") == TASK)
        if n:
            _state["acked"] += n
            _state["first_ack"] = _state["first_ack"] or now
            _state["last_ack"] = now
            if EXPECT and _state["acked"] >= EXPECT and not _state["stopped"]:
                _state["stopped"] = True
                os.kill(os.getpid(), signal.SIGTERM)  # the daemon's own graceful stop
        return result

    ack._bench_counted = True  # type: ignore[attr-defined]
    acks.Acker.ack = ack  # type: ignore[method-assign]


_progress_lock = threading.Lock()


def _write_progress() -> None:
    """The ack count so far, for a parent that checkpoints a long run (bench/tombstones.py). Under a lock: the
    progress thread and the exit's ``_dump`` share the temporary file, and a rename of it by one left the other's
    rename failing (the run then had no result file)."""
    if OUT:
        with _progress_lock:
            tmp = OUT + ".progress.tmp"
            with open(tmp, "w") as f:
                f.write(str(_state["acked"]))
            os.replace(tmp, OUT + ".progress")


def _write_live_counts() -> None:
    tmp = OUT + ".cql.tmp"
    with open(tmp, "w") as f:
        json.dump(cqlcount.totals(), f)
    os.replace(tmp, OUT + ".cql")


def _progress_loop() -> None:
    last = -1
    while True:
        time.sleep(0.2)
        if _state["acked"] != last:
            last = _state["acked"]
            _write_progress()
        if LIVE:
            _write_live_counts()


def _dump() -> None:
    if not OUT:
        return
    _write_progress()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    data = {
        **{k: v for k, v in _state.items() if k != "stopped"},
        "cpu_s": time.process_time() - _state["cpu0"],
        "utime_s": usage.ru_utime,
        "stime_s": usage.ru_stime,
        "send_ms": _send_ms,
        "late_ms": _late_ms,
        "late_rows": _late_rows,
        "cql": cqlcount.COUNTS.as_dict(),
        "wire": dict(cqlcount.WIRE),
        "statement_names": {text: name for _, text, name in taketrace.prepared_names()},
    }
    if TAKES:
        data["takes"] = taketrace.summary()
    tmp = OUT + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, OUT)


if OUT:
    threading.Thread(target=_progress_loop, name="bench-progress", daemon=True).start()
    _install_ack_counter()
    if os.environ.get("BENCH_PROBE_CQL", "1") != "0":  # the profile run leaves the counting out of the picture
        cqlcount.install()
        cqlcount.install_wire()
        cqlcount.BY_CALLER = LIVE
    if TAKES:
        taketrace.install()
    if ROWS:
        use(RowOfLate())
    atexit.register(_dump)
