"""A real ``casque serve`` whose reads of the ``access_keys`` table are counted from outside the
code under test, for the flood test (tests/test_sqs_tamper.py).

    python -m tests.support.counted_serve COUNT_FILE serve [casque serve options...]

Before running ``daemon.cli.main`` unchanged, it observes the Database (``Database.observe``: every
request the engine sends through ``run`` or ``run_all``) and counts the SELECTs that name
``access_keys``. A thread writes ``{"t": unix time, "access_key_reads": n}`` to COUNT_FILE every
50 ms (written whole, then renamed), so a test reads a count taken after its last request.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.support import count_file

READS = [0]


def _counts(stmt: Any) -> bool:
    prepared = getattr(stmt, "prepared_statement", None)
    text = prepared.query_string if prepared is not None else str(getattr(stmt, "query_string", stmt))
    return text.lstrip()[:6].upper() == "SELECT" and ".access_keys" in text


def install() -> None:
    from daemon.engine.storage.db import Database

    def count(db: Any, stmt: Any) -> None:
        READS[0] += _counts(stmt)

    Database.observe(count)


def main(argv: list[str]) -> int:
    install()
    count_file.keep_writing(Path(argv[0]), lambda: {"access_key_reads": READS[0]})
    from daemon.cli.main import main as casque

    return casque(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
