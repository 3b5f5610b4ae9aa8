"""A real ``casque serve`` whose reads of the ``access_keys`` table are counted from outside the
code under test, for the flood test (tests/test_sqs_tamper.py).

    python -m tests.support.counted_serve COUNT_FILE serve [casque serve options...]

Before running ``daemon.cli.main`` unchanged, it wraps ``Database.run`` and ``Database.run_all``
(every statement the engine sends goes through one of them) and counts the SELECTs that name
``access_keys``. A thread writes ``{"t": unix time, "access_key_reads": n}`` to COUNT_FILE every
50 ms (written whole, then renamed), so a test reads a count taken after its last request.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

READS = [0]


def _counts(stmt: Any) -> bool:
    prepared = getattr(stmt, "prepared_statement", None)
    text = prepared.query_string if prepared is not None else str(getattr(stmt, "query_string", stmt))
    return text.lstrip()[:6].upper() == "SELECT" and ".access_keys" in text


def install() -> None:
    from daemon.engine import db as dbmod

    run, run_all = dbmod.Database.run, dbmod.Database.run_all

    async def counted_run(self: Any, stmt: Any, *args: Any, **kwargs: Any) -> Any:
        READS[0] += _counts(stmt)
        return await run(self, stmt, *args, **kwargs)

    async def counted_run_all(self: Any, stmt: Any, *args: Any, **kwargs: Any) -> Any:
        READS[0] += _counts(stmt)
        return await run_all(self, stmt, *args, **kwargs)

    dbmod.Database.run = counted_run  # type: ignore[method-assign]
    dbmod.Database.run_all = counted_run_all  # type: ignore[method-assign]


def keep_writing(path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    while True:
        tmp.write_text(json.dumps({"t": time.time(), "access_key_reads": READS[0]}))
        tmp.replace(path)
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    install()
    threading.Thread(target=keep_writing, args=(Path(argv[0]),), daemon=True).start()
    from daemon.cli.main import main as casque

    return casque(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
