"""Receives of one standard queue that come while a take for it runs share the next take.

Concurrent receives of one queue in a process meet at the same shard rows, and a row is taken by
one take at a time: the lock protocol costs a take five round trips, and the others find the row
busy with it, park, and are woken one by one. Clients receiving from a one-shard queue would each
wait in line for the takes of all those ahead of them.

So receives wait in *groups*, as a database's group commit does. While fewer takes of its key are
under way than the queue has shards (at most ``MAX_PARALLEL``), a receive takes for itself at once
(a lone receive waits for nothing). One that comes when that many run joins the open group, whose
first member takes for them all, up to ``JOINT_CAP`` messages, as soon as one of those takes ends,
and hands each member its share in arrival order. A group full to the cap opens the next one.
Each member answered from its share counts in ``casque_receives_joined_total`` (a receive that took
for itself does not): from outside the process, the proof that receives shared takes.

What it rests on: a standard queue promises no order and a message may go to any receive, so one
take split among receives is what separate takes would have given, with the same visibility (the
key holds it). A FIFO queue never comes here: a group's messages in flight must stay with one
receive. A member that leaves (its client gone) while its group takes loses nothing: its share is in
flight unanswered and comes back after the visibility timeout, as an answer lost on the wire does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from daemon.base import metrics

#: Most messages one joint take asks for: ten SQS receives of 10.
JOINT_CAP = 100
#: Most takes of one key at once: a queue's shards can be taken in parallel, up to this many.
MAX_PARALLEL = 4

T = TypeVar("T")
#: A take: asked for n, gives up to n.
Run = Callable[[int], Awaitable[list[T]]]


@dataclass
class _Group(Generic[T]):
    wants: list[int]
    shares: asyncio.Future[list[list[T]]] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class JointTakes(Generic[T]):
    """Group takes per key (a queue and its visibility): see the module's docstring."""

    def __init__(self, cap: int = JOINT_CAP) -> None:
        self.cap = cap
        self._open: dict[Hashable, _Group[T]] = {}  # the group still taking members, per key
        self._running: dict[Hashable, set[asyncio.Future[list[list[T]]]]] = {}  # the takes under way, per key

    def busy(self, key: Hashable, parallel: int = 1) -> bool:
        """Whether a receive of ``key`` would wait for a take under way: it joins a group instead of looking."""
        return key in self._open or len(self._running.get(key, ())) >= parallel

    def waiting(self, key: Hashable) -> bool:
        """Whether receives of ``key`` wait in a group for a take under way: the take keeps its row's lock for them
        (engine/take/holds.py ``adopt``), so theirs is a read and a batch."""
        return key in self._open

    async def take(self, key: Hashable, limit: int, run: Run[T], parallel: int = 1) -> list[T]:
        """Up to ``limit`` items: from this caller's own ``run(n)`` while fewer than ``parallel`` takes of
        ``key`` are under way, else its share of the next group's. A group whose leader left gives its
        members their own take; a group's failed take raises its error in every member."""
        group = self._open.get(key)
        if group is None and not self.busy(key, parallel):
            return await self._run(key, _Group([limit]), run)
        if group is not None and sum(group.wants) + limit <= self.cap:
            index = len(group.wants)
            group.wants.append(limit)
            try:
                share = (await asyncio.shield(group.shares))[index]
            except _LeaderGone:
                return await run(limit)
            metrics.RECEIVES_JOINED.inc()  # the proof, from outside the process, that receives shared takes
            return share
        return await self._lead(key, limit, run, parallel)

    async def _lead(self, key: Hashable, limit: int, run: Run[T], parallel: int) -> list[T]:
        """Open a group, and take for it once fewer than ``parallel`` takes of ``key`` are under way."""
        group: _Group[T] = _Group([limit])
        self._open[key] = group
        try:
            while len(under_way := self._running.get(key, set())) >= parallel:
                await asyncio.wait(set(under_way), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            _fail(group, _LeaderGone())
            raise
        finally:
            if self._open.get(key) is group:
                del self._open[key]  # closed: later receives open the next group
        return await self._run(key, group, run)

    async def _run(self, key: Hashable, group: _Group[T], run: Run[T]) -> list[T]:
        under_way = self._running.setdefault(key, set())
        under_way.add(group.shares)
        try:
            got = await run(sum(group.wants))  # at most the cap, or the leader's own limit alone
            group.shares.set_result(_split(got, group.wants))
            return group.shares.result()[0]
        except BaseException as exc:
            _fail(group, exc if isinstance(exc, Exception) else _LeaderGone())
            raise
        finally:
            under_way.discard(group.shares)
            if not under_way and self._running.get(key) is under_way:
                del self._running[key]


class _LeaderGone(Exception):
    """The group's leader was cancelled: its members take for themselves."""


def _fail(group: _Group[T], exc: Exception) -> None:
    if not group.shares.done():
        group.shares.set_exception(exc)
        group.shares.exception()  # retrieved: the members raise it, and there may be none


def _split(got: list[T], wants: list[int]) -> list[list[T]]:
    """Each member's share, in arrival order: the first gets up to its want, then the next."""
    shares, at = [], 0
    for want in wants:
        shares.append(got[at : at + want])
        at += want
    return shares
