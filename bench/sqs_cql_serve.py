"""``casque serve`` with every CQL request charged to the SQS call that caused it, call by call.

    python -m bench.sqs_cql_serve CALLS_FILE [casque serve options...]

Runs the real ``casque serve`` (``daemon.cli.main``, unchanged) after observing the Database
(``Database.observe``: every request the engine sends through ``run`` or ``run_all``). Each request
is charged to the call named by ``daemon.http.sqs.app.SERVING`` in the context it runs in: the
(action, request id) the endpoint sets while an action runs, inherited by the tasks the action
starts. A client finds its call by the RequestId the answer carried. Per call it keeps the action,
and for each request its offset from the call's first one (ms) and its statement, so a long poll's
requests before it parks are told from those while it waits. Requests outside any call (timers,
the sweep, caches refreshed in the background) are counted apart.

A thread writes ``{"t": unix time, "data": {"calls": {request id: {...}}, "outside": n}}`` to
CALLS_FILE every 50 ms (written whole, then renamed; encoded again only when a request came): a reader waits for a ``t``
later than its call's answer. The last ``KEEP`` calls are kept.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

KEEP = 2000
_WS = re.compile(r"\s+")
_KS = re.compile(r"\b\w+\.(\w+)\b")
CALLS: OrderedDict[str, dict[str, Any]] = OrderedDict()
OUTSIDE = [0]
_LOCK = threading.Lock()
_CHANGED = [0]


def statement(db: Any, stmt: Any) -> str:
    """A request's short name: its CQL without the keyspace; a batch as ``batch[n]: first member``."""
    inner = getattr(stmt, "_statements_and_parameters", None)
    if inner is not None:
        names = sorted(
            {_short(db.statement_text(q) or "?") if prepared else _short(str(q)) for prepared, q, _ in inner}
        )
        return f"batch[{len(inner)}]: " + " | ".join(names)
    prepared = getattr(stmt, "prepared_statement", None)
    return _short(prepared.query_string if prepared is not None else str(getattr(stmt, "query_string", stmt)))


def _short(cql: str) -> str:
    return _KS.sub(r"\1", _WS.sub(" ", cql).strip())[:160]


def install() -> None:
    from daemon.engine.storage.db import Database
    from daemon.http.sqs.app import SERVING

    def charge(db: Any, stmt: Any) -> None:
        serving = SERVING.get()
        now = time.perf_counter()
        with _LOCK:
            _CHANGED[0] += 1
            if serving is None:
                OUTSIDE[0] += 1
                return
            action, rid = serving
            call = CALLS.get(rid)
            if call is None:
                call = CALLS[rid] = {"action": action, "t0": now, "requests": []}
                while len(CALLS) > KEEP:
                    CALLS.popitem(last=False)
            call["requests"].append([round((now - call["t0"]) * 1000, 1), statement(db, stmt)])

    Database.observe(charge)


def snapshot() -> str:
    """The calls and the count outside any call, as JSON (without the time)."""
    with _LOCK:
        calls = {
            rid: {"action": c["action"], "t0": c["t0"], "requests": list(c["requests"])} for rid, c in CALLS.items()
        }
        outside = OUTSIDE[0]
    return json.dumps({"calls": calls, "outside": outside})


def keep_writing(path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    seen, body = -1, ""
    while True:
        if _CHANGED[0] != seen:  # encoded again only when a request came: the server's CPU is measured too
            seen = _CHANGED[0]
            body = snapshot()
        tmp.write_text(f'{{"t": {time.time()}, "data": {body}}}')
        tmp.replace(path)
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m bench.sqs_cql_serve CALLS_FILE [casque serve options...]", file=sys.stderr)
        return 2
    install()
    threading.Thread(target=keep_writing, args=(Path(argv[0]),), daemon=True).start()
    from daemon.cli.main import main as casque

    return casque(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
