"""Middleware hooks around every handler call, retry and poison (sync and async), against the
real node: each outcome reaches the hooks exactly once and in order, a hook that raises changes
nothing, and the daemon's own metrics are counted through the same hooks."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from daemon import Backoff, Context, Delivery, Handler, Middleware, Poison
from daemon.base import metrics
from daemon.engine.client import Casque
from daemon.service.dispatcher import Dispatcher
from daemon.service.hooks import Hooks
from daemon.service.observers import MetricsObserver
from daemon.service.registry import Registry


class Ok(Handler):
    async def handle(self, ctx: Context, payload: Any) -> None:
        return None


class SyncFail(Handler):
    def handle(self, ctx: Context, payload: Any) -> None:
        raise ValueError("always")


class Give(Handler):
    async def handle(self, ctx: Context, payload: Any) -> None:
        raise Poison("not worth it")


class Recorder(Middleware):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def before(self, d: Delivery) -> None:
        d.state["seen_before"] = True
        assert d.ctx is not None and d.ctx.task == d.task
        self.calls.append(("before", d.task, ""))

    def after(self, d: Delivery) -> None:
        assert d.state.get("seen_before")  # the same delivery object as in before
        self.calls.append(("after", d.task, d.outcome))

    def on_retry(self, d: Delivery) -> None:
        assert d.retry_in == 0 and isinstance(d.error, ValueError)
        self.calls.append(("on_retry", d.task, d.outcome))

    def on_poison(self, d: Delivery) -> None:
        self.calls.append(("on_poison", d.task, d.reason))


class AsyncRecorder(Recorder):
    async def before(self, d: Delivery) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        Recorder.before(self, d)

    async def after(self, d: Delivery) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        Recorder.after(self, d)


class Broken(Middleware):
    def before(self, d: Delivery) -> None:
        raise RuntimeError("hook bug")

    async def after(self, d: Delivery) -> None:
        raise RuntimeError("hook bug")


async def test_hooks_see_every_call_retry_and_poison_once(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name, shards=1, buckets=1)
    reg = Registry()
    reg.add(Ok, "h.ok")
    reg.add(SyncFail, "h.fail", max_attempts=2, backoff=Backoff(base=0, jitter=False))
    reg.add(Give, "h.poison")
    sync_rec, async_rec = Recorder(), AsyncRecorder()
    reg.use(Broken())
    hooks = Hooks([MetricsObserver(cq.clock), sync_rec, async_rec] + reg.middleware)
    for task in ("h.ok", "h.fail", "h.poison", "h.unknown"):
        await cq.send(queue_name, task, None)
    acked_before = metrics.counter_value(metrics.ACKED, queue_name, "h.ok")
    settings = cq.settings.worker
    dispatcher = Dispatcher(cq, reg, settings, [queue_name], hooks=hooks)
    runner = asyncio.create_task(dispatcher.run())
    deadline = time.monotonic() + 30
    while sum(1 for c in sync_rec.calls if c[0] == "on_poison") < 3 or not any(
        c[1] == "h.ok" and c[0] == "after" for c in sync_rec.calls
    ):
        assert time.monotonic() < deadline, sync_rec.calls
        await asyncio.sleep(0.05)
    await dispatcher.drain(5000)
    await runner
    for rec in (sync_rec, async_rec):
        by_task = {
            t: [(c[0], c[2]) for c in rec.calls if c[1] == t] for t in ("h.ok", "h.fail", "h.poison", "h.unknown")
        }
        assert by_task["h.ok"] == [("before", ""), ("after", "acked")]
        assert by_task["h.fail"] == [
            ("before", ""),
            ("after", "retried"),
            ("on_retry", "retried"),
            ("before", ""),
            ("after", "poisoned"),
            ("on_poison", "failed on its last attempt (2 of 2)"),
        ]
        assert by_task["h.poison"] == [("before", ""), ("after", "poisoned"), ("on_poison", "not worth it")]
        assert by_task["h.unknown"] == [
            ("on_poison", "unknown task 'h.unknown': no handler is registered under this name")
        ]
    assert metrics.counter_value(metrics.ACKED, queue_name, "h.ok") == acked_before + 1  # counted through the hooks
    assert metrics.counter_value(metrics.POISONED, queue_name, "h.fail") == 1
    assert metrics.counter_value(metrics.RETRIED, queue_name, "h.fail") == 1
    assert dispatcher.counters.acked == 1 and dispatcher.counters.poisoned == 3  # the broken hook changed nothing
    assert not hooks._open  # every delivery was forgotten at its end


def test_use_refuses_what_is_not_middleware() -> None:
    import pytest

    from daemon.base.errors import UsageError

    with pytest.raises(UsageError, match="is not a daemon.Middleware"):
        Registry().use(object())  # type: ignore[arg-type]
