"""A handler module for a test daemon that also counts the daemon's message reads: ``write_config(...,
handler_module="tests.support.message_reads")``.

Imported by the daemon like any handler module, it registers the tests' recording handlers and observes every
Database of the process (``Database.observe``, outside the code under test), counting the SELECTs that read whole
messages (those whose columns include ``payload``: a take's reads, never a peek's). A thread writes
``message_reads`` to ``$CASQUE_TEST_READS`` (tests/support/count_file.py: ``count_file.read(path, "message_reads",
after)``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import daemon.testing.handlers  # noqa: F401 - the recording handlers the tests' jobs name
from daemon.engine.storage.db import Database
from tests.support import count_file

READS = [0]


def _reads_messages(stmt: Any) -> bool:
    prepared = getattr(stmt, "prepared_statement", None)
    text = prepared.query_string if prepared is not None else str(getattr(stmt, "query_string", stmt))
    return text.lstrip()[:6].upper() == "SELECT" and ".messages " in text and " payload" in text


def _count(db: Any, stmt: Any) -> None:
    READS[0] += _reads_messages(stmt)


if os.environ.get("CASQUE_TEST_READS"):
    Database.observe(_count)
    count_file.keep_writing(Path(os.environ["CASQUE_TEST_READS"]), lambda: {"message_reads": READS[0]})
