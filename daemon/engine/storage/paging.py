"""Reading every row of a result, one page at a time, without holding them all.

``Database.run`` returns the driver's *first page* only (5,000 rows by default): that is right for
the hot path, whose reads are bounded by ``LIMIT``, and wrong for listings and bulk actions, which
then silently miss everything after row 5,000. Every unbounded read (keys, poison, history, queues)
goes through here instead: ``page`` returns one page and the driver's paging token, ``pages``
yields page after page until the token runs out. A page is fetched only when the caller asks for
it, so memory stays at one page however large the partition.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from cassandra.query import PreparedStatement, SimpleStatement, Statement

from daemon.engine.storage.db import Database

PAGE_SIZE = 1000


@dataclass
class Page:
    rows: list[Any]
    token: bytes | None  # the driver's paging state; None: this was the last page


async def page(
    db: Database,
    stmt: str | Statement,
    params: Sequence[Any] | None = None,
    size: int = PAGE_SIZE,
    token: bytes | None = None,
) -> Page:
    """One page of at most ``size`` rows, starting where ``token`` (from the previous page) left off."""
    assert db.session is not None, "not connected"
    bound = _sized(stmt, params, size)
    db.count_request(bound)
    plain = isinstance(stmt, str)  # a string statement keeps its %s parameters; the others are bound here
    rows, next_token = await db.page(bound, params if plain else None, token)
    return Page(list(rows), next_token)


async def pages(
    db: Database, stmt: str | Statement, params: Sequence[Any] | None = None, size: int = PAGE_SIZE
) -> AsyncIterator[list[Any]]:
    """Every page of a result, in order; stops after the page that carries no paging token."""
    token: bytes | None = None
    while True:
        found = await page(db, stmt, params, size, token)
        if found.rows:
            yield found.rows
        if found.token is None:
            return
        token = found.token


async def every_row(
    db: Database, stmt: str | Statement, params: Sequence[Any] | None = None, size: int = PAGE_SIZE
) -> list[Any]:
    """All rows of a result (for reads whose size the caller has bounded some other way)."""
    out: list[Any] = []
    async for rows in pages(db, stmt, params, size):
        out += rows
    return out


def _sized(stmt: str | Statement, params: Sequence[Any] | None, size: int) -> Statement:
    if isinstance(stmt, PreparedStatement):
        bound: Statement = stmt.bind(params or [])
    elif isinstance(stmt, str):
        bound = SimpleStatement(stmt)
    else:
        bound = stmt
    bound.fetch_size = size
    return bound
