"""The console's pages (GET): each reads only what it shows, and nothing it shows is consumed.

The queues page reads one page of the ``queues`` table by token and counts only the queues on that
page, so it costs the same with ten queues or a million. Peeks read the shard rows without taking
anything.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from daemon.base.errors import MessageNotFound, UsageError
from daemon.base.model import QueueSettings
from daemon.engine.client import Casque
from daemon.engine.observe.fifo_groups import ROW_LIMIT, FifoGroups
from daemon.engine.observe.samples import recent_rates, series
from daemon.engine.storage.placement import parse_id
from daemon.http.console.chart import render_chart

PEEK_DEFAULT, PEEK_MAX = 20, 200
POISON_SHOWN = 200
GROUPS_SHOWN = 100  # a FIFO queue's groups listed on its page, most messages first
RATE_WINDOW_MS = 300_000
COUNTING_AT_ONCE = 4  # queues counted in parallel on one page (each reads buckets x shards rows)
# On the queues page a queue is counted exactly only when that is cheap (at most this many shard
# rows); a larger one shows its daemons' latest depth sample (every 60 s), marked as such. Counting a
# page of queues of the default 16 x 24 rows takes seconds, too slow for a page that refreshes itself;
# a queue's own page always counts exactly.
EXACT_ROWS_ON_LIST = 64
SAMPLE_MAX_AGE_MS = 150_000


def render(request: Request, template: str, context: dict[str, Any], status: int = 200) -> Response:
    app = request.app
    user = getattr(request.state, "user", None)
    base = {
        "user": user,
        "root": request.scope.get("root_path", ""),
        "here": _here(request),
        "refresh_s": app.state.settings.refresh,
        "msg": request.query_params.get("msg"),
        "err": request.query_params.get("err"),
    }
    return app.state.templates.TemplateResponse(request, template, {**base, **context}, status_code=status)


def _here(request: Request) -> str:
    query = request.url.query
    return request.url.path + (f"?{query}" if query else "")


def _cq(request: Request) -> Casque:
    return request.app.state.cq


async def home(request: Request) -> Response:
    return RedirectResponse(f"{request.scope.get('root_path', '')}/queues", status_code=303)


async def queues(request: Request) -> Response:
    cq = _cq(request)
    search = request.query_params.get("q", "").strip()
    after = _token(request.query_params.get("after"))
    found, next_token = await cq.admin.page(after, request.app.state.settings.page_size, search)
    now = cq.clock.now_ms()
    sem = asyncio.Semaphore(COUNTING_AT_ONCE)

    async def one(qs: QueueSettings) -> dict[str, Any]:
        async with sem:
            return await summary(cq, qs, now, exact=qs.shards * qs.buckets <= EXACT_ROWS_ON_LIST)

    rows = await asyncio.gather(*(one(qs) for qs in found))
    return render(
        request,
        "queues.html",
        {"rows": rows, "search": search, "after": after, "next_token": next_token, "exact_rows": EXACT_ROWS_ON_LIST},
    )


async def summary(cq: Casque, qs: QueueSettings, now: int, exact: bool = True) -> dict[str, Any]:
    """Counts and rates of one queue. Counts are exact (read from the shard rows) unless ``exact`` is
    off, then they are the latest depth sample a daemon wrote (``sampled_s`` ago), or unknown."""
    counting = cq.observe.depth(qs, now) if exact else _no_count()
    depth, poisoned, samples = await asyncio.gather(
        counting, cq.admin.poison_count(qs.name), cq.observe.samples(qs.name, now - RATE_WINDOW_MS)
    )
    sent, acked = recent_rates(samples, now, RATE_WINDOW_MS)
    row = {
        "name": qs.name,
        "settings": qs,
        "poisoned": poisoned,
        "sent_per_s": sent,
        "acked_per_s": acked,
        "sampled_s": None,
        "waiting": None,
        "scheduled": None,
        "in_flight": None,
        "oldest_s": None,
    }
    if depth is not None:
        oldest = (now - depth.oldest_due_ms) / 1000 if depth.oldest_due_ms is not None else None
        row.update(waiting=depth.waiting_due, scheduled=depth.scheduled, in_flight=depth.in_flight, oldest_s=oldest)
        return row
    sample = max((r for r in samples if r.depth_waiting is not None), key=lambda r: r.at, default=None)
    if sample is not None and now - sample.at <= SAMPLE_MAX_AGE_MS:
        row.update(
            waiting=sample.depth_waiting,
            scheduled=sample.depth_scheduled,
            in_flight=sample.depth_in_flight,
            sampled_s=(now - sample.at) / 1000,
        )
    return row


async def _no_count() -> None:
    return None


async def queue(request: Request) -> Response:
    cq = _cq(request)
    qs = await cq.queue_settings(request.path_params["queue"], fresh=True)
    n = _int(request.query_params.get("n"), PEEK_DEFAULT, 1, PEEK_MAX, "n")
    now = cq.clock.now_ms()
    counts, peeked, groups = await asyncio.gather(summary(cq, qs, now), cq.peek(qs.name, n), _groups(cq, qs, now))
    return render(
        request,
        "queue.html",
        {
            "q": counts,
            "qs": qs,
            "peeked": peeked,
            "n": n,
            "now": now,
            "groups": groups,
            "groups_shown": GROUPS_SHOWN,
            "group_row_limit": ROW_LIMIT,
        },
    )


async def _groups(cq: Casque, qs: QueueSettings, now: int) -> FifoGroups | None:
    """A FIFO queue's groups (a bounded read, engine/observe/fifo_groups.py); None for a standard queue."""
    if not qs.fifo:
        return None
    return await cq.observe.fifo_groups(qs, now)


async def chart(request: Request) -> Response:
    cq = _cq(request)
    qs = await cq.queue_settings(request.path_params["queue"])
    now = cq.clock.now_ms()
    points = series(await cq.observe.samples(qs.name, now - 3_600_000), now)
    return Response(render_chart(points, now), media_type="image/svg+xml", headers={"Cache-Control": "no-store"})


async def message(request: Request) -> Response:
    cq = _cq(request)
    name = request.path_params["queue"]
    qs = await cq.queue_settings(name)
    mid = _id(request.path_params["id"])
    m = await cq.get(name, id=mid)
    if m is None:
        raise MessageNotFound(f"no message {mid} in queue '{name}': it may have been acked, cancelled or poisoned")
    history = []
    if qs.history:
        history = await cq.observe.history(name, message_id=mid)
    return render(request, "message.html", {"qs": qs, "m": m, "history": history, "now": cq.clock.now_ms()})


async def poison(request: Request) -> Response:
    cq = _cq(request)
    qs = await cq.queue_settings(request.path_params["queue"])
    records, count = await asyncio.gather(cq.admin.poisoned(qs.name, POISON_SHOWN), cq.admin.poison_count(qs.name))
    tasks = sorted({r.task for r in records})
    return render(
        request, "poison.html", {"qs": qs, "records": records, "count": count, "tasks": tasks, "shown": POISON_SHOWN}
    )


async def poisoned(request: Request) -> Response:
    cq = _cq(request)
    qs = await cq.queue_settings(request.path_params["queue"])
    mid = _id(request.path_params["id"])
    record = await cq.admin.poisoned_one(qs.name, mid)
    if record is None:
        raise MessageNotFound(f"no poisoned message {mid} in queue '{qs.name}': it may have been replayed or purged")
    return render(request, "poisoned.html", {"qs": qs, "r": record})


async def schedules(request: Request) -> Response:
    cq = _cq(request)
    qs = await cq.queue_settings(request.path_params["queue"])
    entries = await cq.schedules(qs.name)
    return render(request, "schedules.html", {"qs": qs, "entries": entries})


async def daemons(request: Request) -> Response:
    cq = _cq(request)
    found = await cq.observe.daemons()
    return render(request, "daemons.html", {"daemons": found, "now": cq.clock.now_ms()})


def _token(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"invalid page token {text!r}: follow the console's 'next page' link") from None


def _int(text: str | None, default: int, lo: int, hi: int, what: str) -> int:
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = lo - 1
    if not lo <= value <= hi:
        raise UsageError(f"invalid {what} {text!r}: use a whole number from {lo} to {hi}")
    return value


def _id(text: str) -> uuid.UUID:
    try:
        return parse_id(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
