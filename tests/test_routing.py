"""``@register(..., queue=...)`` routes: a daemon started without queues serves the queues its
handlers name (and only those), against the real node."""

from __future__ import annotations

from typing import Any

import pytest

from daemon import Context, Handler
from daemon.base.errors import ConfigError
from daemon.engine.client import Casque
from daemon.service.registry import Registry
from daemon.service.worker import Worker, served_queues

from . import conftest


class Record(Handler):
    seen: list[tuple[str, Any]] = []

    async def handle(self, ctx: Context, payload: Any) -> None:
        Record.seen.append((ctx.queue, payload))


def test_served_queues_come_from_config_else_from_the_handlers() -> None:
    reg = Registry()
    reg.add(Record, "r.a", queue="emails")
    reg.add(Record, "r.b", queue="reports")
    reg.add(Record, "r.c")  # names no queue: the class default, "default"
    s = conftest.test_settings()
    s.worker.queues = []
    assert served_queues(s, reg) == ["default", "emails", "reports"]
    s.worker.queues = ["only"]
    assert served_queues(s, reg) == ["only"]
    s.worker.queues = []
    with pytest.raises(ConfigError, match="no queues to serve"):
        served_queues(s, Registry())


async def test_daemon_without_queues_serves_the_queues_its_handlers_name(cq: Casque, queue_name: str) -> None:
    a, b, other = f"{queue_name}_a", f"{queue_name}_b", f"{queue_name}_other"
    reg = Registry()
    reg.add(Record, "route.a", queue=a)
    reg.add(Record, "route.b", queue=b)
    for q in (a, b, other):
        await cq.create_queue(q, if_missing=True)
    await cq.send(a, "route.a", 1)
    await cq.send(b, "route.b", 2)
    await cq.send(other, "route.a", 3)  # a queue no handler names: not served
    s = conftest.test_settings()
    s.worker.queues = []
    s.worker.handler_modules = []
    s.worker.consumers = 2
    Record.seen = []
    worker = Worker(s, registry=reg)
    assert await worker.run(burst=True) == 0
    assert worker.queues == sorted([a, b])
    assert sorted(Record.seen) == sorted([(a, 1), (b, 2)])
    assert [m.payload for m in await cq.peek(other)] == [3]
