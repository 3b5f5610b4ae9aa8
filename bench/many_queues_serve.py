"""``casque serve`` with its CQL charged to the SQS request that caused it (for bench.many_queues).

    python -m bench.many_queues_serve STATS_FILE [casque serve options...]

Runs the real ``casque serve`` (``daemon.cli.main``) after wrapping, in this process only:
  * the Database's requests (``Database.observe``: bench/cqlcount.py counts every one; here each one
    is also charged to the SQS request in whose context it runs, through a context variable);
  * ``SqsService.run``, which sets that variable and, when the request ends, files its CQL under
    what it was: a receive that returned messages, an empty long poll (WaitTimeSeconds > 0), an
    empty short receive (WaitTimeSeconds = 0: the cost of looking at an idle queue), a send, a
    delete, anything else.
CQL outside any request (timers, caches refreshed in the background) is the total minus the
charged part. While a file STATS_FILE.by-caller exists, every request is also counted by the engine
function that issued it (bench/cqlcount.py ``BY_CALLER``: a frame walk per request, so only for the
idle window, where it says which loop reads what). A thread writes the counts to STATS_FILE every
0.5 s, so the bench reads them while the server runs and after a kill -9 (losing at most that last
half second).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
from contextvars import ContextVar
from pathlib import Path
from typing import Any

KINDS = ("receive", "empty_long_poll", "empty_receive", "send", "delete", "other")
#: kind -> [requests, CQL requests, CQL reads]; created up front so the writer thread never sees a dict grow
TALLY: dict[str, list[int]] = {k: [0, 0, 0] for k in KINDS}
_CURRENT: ContextVar[list[int] | None] = ContextVar("bench_sqs_request", default=None)


def kind(action: str, params: dict[str, Any], result: dict[str, Any] | None) -> str:
    if action == "ReceiveMessage":
        if result and result.get("Messages"):
            return "receive"
        return "empty_long_poll" if int(params.get("WaitTimeSeconds") or 0) > 0 else "empty_receive"
    if action in ("SendMessage", "SendMessageBatch"):
        return "send"
    if action in ("DeleteMessage", "DeleteMessageBatch"):
        return "delete"
    return "other"


def install() -> None:
    from daemon.engine.storage import db as dbmod
    from daemon.http.sqs.actions import SqsService

    from . import cqlcount

    cqlcount.install()

    def charge(db: Any, stmt: Any) -> None:
        box = _CURRENT.get()
        if box is not None:
            box[0] += 1
            box[1] += cqlcount.kind_of(stmt) == "read"

    dbmod.Database.observe(charge)
    serve_one = SqsService.run

    async def service_run(self: Any, action: str, call: Any) -> dict[str, Any]:
        box = [0, 0]
        token = _CURRENT.set(box)
        result: dict[str, Any] | None = None
        try:
            result = await serve_one(self, action, call)
            return result
        finally:
            _CURRENT.reset(token)
            t = TALLY[kind(action, call.params, result)]
            t[0] += 1
            t[1] += box[0]
            t[2] += box[1]

    SqsService.run = service_run  # type: ignore[method-assign]


def stats(latency: dict[str, Any]) -> dict[str, Any]:
    from .cqlcount import COUNTS

    return {
        "by_caller": dict(COUNTS.by_caller),
        "by_statement": {k: n for k, n in list(COUNTS.by_statement.items()) if k.startswith("SELECT")},
        "pid": os.getpid(),
        "t": time.time(),
        "cql_requests": COUNTS.requests,
        "cql_reads": COUNTS.reads,
        "tally": {k: list(v) for k, v in TALLY.items()},
        "cql_latency_ms": latency,
    }


def cql_latency() -> dict[str, Any]:
    """p50/p99 of the server's CQL round trips by kind (is Cassandra the slow part?)."""
    from .cqlcount import COUNTS

    out = {}
    for kind, samples in list(COUNTS.latency_ms.items()):
        s = sorted(samples)
        if s:
            out[kind] = {"count": len(s), "p50": s[len(s) // 2], "p99": s[min(len(s) - 1, int(0.99 * len(s)))]}
    return out


def keep_writing(path: Path, every_s: float = 0.5) -> None:
    from . import cqlcount

    tmp, flag = path.with_suffix(".tmp"), path.with_name(path.name + ".by-caller")
    latency: dict[str, Any] = {}
    for n in itertools.count():
        cqlcount.BY_CALLER = flag.exists()
        if n % 10 == 0:  # sorting the samples costs the server CPU: every 5 s is enough
            latency = cql_latency()
        tmp.write_text(json.dumps(stats(latency)))
        tmp.replace(path)
        time.sleep(every_s)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m bench.many_queues_serve STATS_FILE [casque serve options...]", file=sys.stderr)
        return 2
    install()
    threading.Thread(target=keep_writing, args=(Path(argv[0]),), daemon=True).start()
    from daemon.cli.main import main as casque

    return casque(["serve", *argv[1:]])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
