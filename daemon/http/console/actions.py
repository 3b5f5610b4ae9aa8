"""The console's actions (POST): each one is allowed only to the admin role with a valid CSRF token
(checked before it gets here, app.py), logged with who did it, and answered with a redirect to the
page it came from carrying one line saying what happened (or, for bad input, what to fix).

Purges (of messages or of the poison queue) happen only when the form carries the queue's name
typed again: a stray click can't empty a queue.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from daemon.base.durations import parse_duration
from daemon.base.errors import CasqueError, UsageError
from daemon.base.logs import get_logger
from daemon.engine.client import Casque
from daemon.engine.storage.placement import parse_id

log = get_logger("casque.console")


async def create_queue(request: Request) -> Response:
    form = await request.form()
    try:
        name = _text(form, "name")
        shards, max_attempts = _opt_int(form, "shards"), _opt_int(form, "max_attempts")
        timeout = _text(form, "timeout", required=False)
        qs = await _cq(request).create_queue(
            name,
            timeout=parse_duration(timeout, "timeout") if timeout else None,
            shards=shards,
            max_attempts=max_attempts,
        )
    except CasqueError as exc:
        return _back(request, "/queues", err=str(exc))
    _log(request, "create_queue", qs.name, shards=qs.shards)
    return _back(request, f"/queues/{qs.name}", msg=f"queue {qs.name} created with {qs.shards} shards")


async def send_test(request: Request) -> Response:
    queue = request.path_params["queue"]
    form = await request.form()
    try:
        task = _text(form, "task")
        raw = _text(form, "payload", required=False) or "null"
        try:
            payload = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f'the payload is not JSON ({exc.msg} at character {exc.pos}): write e.g. {{"to": "ada"}}'
            ) from None
        delay = _text(form, "delay", required=False) or None
        key = _text(form, "key", required=False) or None
        group = _text(form, "group", required=False) or None  # FIFO: required by the engine (its own one-line error)
        dedup_id = _text(form, "dedup_id", required=False) or None
        mid = await _cq(request).send(queue, task, payload, delay=delay, key=key, group=group, dedup_id=dedup_id)
    except CasqueError as exc:
        return _back(request, f"/queues/{queue}", err=str(exc))
    _log(request, "send", queue, id=mid, task=task, key=key, group=group)
    if mid.sequence is not None:
        return _back(
            request,
            f"/queues/{queue}",
            msg=f"{'duplicate: already sent as' if mid.duplicate else 'sent'} {mid} (sequence {mid.sequence})",
        )
    return _back(request, f"/queues/{queue}", msg=f"sent {mid}")


async def cancel_message(request: Request) -> Response:
    queue, mid = request.path_params["queue"], request.path_params["id"]
    try:
        m = await _cq(request).cancel(queue, id=mid)
    except CasqueError as exc:
        return _back(request, f"/queues/{queue}", err=str(exc))
    _log(request, "cancel", queue, id=mid, task=m.task if m else None)
    return _back(request, f"/queues/{queue}", msg=f"cancelled {mid}")


async def purge_queue(request: Request) -> Response:
    queue = request.path_params["queue"]
    form = await request.form()
    if not _confirmed(form, queue):
        return _back(request, f"/queues/{queue}", err=f"nothing purged: type the queue's name ({queue}) to confirm")
    count = await _cq(request).admin.purge(queue)
    _log(request, "purge", queue, deleted=count)
    return _back(request, f"/queues/{queue}", msg=f"purged {count} messages from {queue}")


async def replay_poison(request: Request) -> Response:
    """Replay the ticked messages, every message of one task, or all (the form's ``what``)."""
    queue = request.path_params["queue"]
    form = await request.form()
    what = _text(form, "what")
    ids, task = None, None
    try:
        if what == "selected":
            ids = [parse_id(str(v)) for v in form.getlist("id")]
            if not ids:
                raise UsageError("nothing replayed: tick the messages to replay first")
        elif what == "task":
            task = _text(form, "task")
        elif what != "all":
            raise UsageError(f"unknown replay choice {what!r}: use selected, task or all")
    except (CasqueError, ValueError) as exc:
        return _back(request, f"/queues/{queue}/poison", err=str(exc))
    new_ids, left = await _cq(request).admin.replay(queue, ids=ids, task=task)
    _log(
        request,
        "replay",
        queue,
        what=what,
        task=task,
        ids=[str(i) for i in ids or []],
        replayed=len(new_ids),
        left=len(left),
    )
    if left:
        return _back(request, f"/queues/{queue}/poison", err=f"replayed {len(new_ids)}; " + "; ".join(left))
    return _back(request, f"/queues/{queue}/poison", msg=f"replayed {len(new_ids)} messages into {queue}")


async def purge_poison(request: Request) -> Response:
    queue = request.path_params["queue"]
    form = await request.form()
    if not _confirmed(form, queue):
        return _back(
            request, f"/queues/{queue}/poison", err=f"nothing purged: type the queue's name ({queue}) to confirm"
        )
    cq = _cq(request)
    count = await cq.admin.poison_count(queue)
    await cq.admin.purge_poison(queue)
    _log(request, "purge_poison", queue, deleted=count)
    return _back(request, f"/queues/{queue}/poison", msg=f"purged {count} poisoned messages")


async def cancel_schedule(request: Request) -> Response:
    queue = request.path_params["queue"]
    form = await request.form()
    try:
        key = _text(form, "key")
        await _cq(request).cancel(queue, key=key)
    except CasqueError as exc:
        return _back(request, f"/queues/{queue}/schedules", err=str(exc))
    _log(request, "cancel_schedule", queue, key=key)
    return _back(request, f"/queues/{queue}/schedules", msg=f"cancelled {key}: it will not run again")


def _cq(request: Request) -> Casque:
    return request.app.state.cq


def _log(request: Request, action: str, queue: str, **details: Any) -> None:
    log.info(
        "console_action",
        action=action,
        user=request.state.user.name,
        queue=queue,
        client=request.client.host if request.client else None,
        **details,
    )


def _back(request: Request, path: str, msg: str | None = None, err: str | None = None) -> Response:
    note = f"?msg={quote(msg)}" if msg else f"?err={quote(err or '')}"
    return RedirectResponse(f"{request.scope.get('root_path', '')}{quote(path)}{note}", status_code=303)


def _confirmed(form: FormData, queue: str) -> bool:
    return str(form.get("confirm") or "").strip() == queue


def _text(form: FormData, field: str, required: bool = True) -> str:
    value = str(form.get(field) or "").strip()
    if required and not value:
        raise UsageError(f"the form field '{field}' is empty: fill it in")
    return value


def _opt_int(form: FormData, field: str) -> int | None:
    value = _text(form, field, required=False)
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{field} must be a whole number, got {value!r}") from None
