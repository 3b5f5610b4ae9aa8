"""Middleware: code that runs around every handler call, on every retry and on every poison.

    from daemon import Middleware, use

    class Timing(Middleware):
        def before(self, d):                 # just before the handler runs (d.ctx is its Context)
            d.state["t0"] = time.monotonic()
        async def after(self, d):            # after every handler call: d.outcome is acked,
            ...                              #   retried, poisoned or timed_out; d.error if it raised
        def on_retry(self, d): ...           # the message was put back (d.retry_in seconds)
        def on_poison(self, d): ...          # it went to the poison queue (d.reason), also when no
                                             #   handler ran (unknown task, corrupt data)
    use(Timing())                            # in a module listed in worker.handler_modules

Each method may be ``def`` (runs inline on the event loop: keep it quick) or ``async def``
(awaited; the message holds its in-flight slot meanwhile). ``before`` runs inside the handler's
timeout. A hook that raises is logged (``hook_failed``) and never changes what happens to the
message. The daemon's own Prometheus counters and message history are middleware too
(service/observers.py), so a hook sees exactly the outcomes they count.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from daemon.base.logs import get_logger
from daemon.base.model import Message
from daemon.service.handler import Context

log = get_logger("casque.hooks")
METHODS = ("before", "after", "on_retry", "on_poison")


@dataclass
class Delivery:
    """One delivery of one message, as hooks see it; the same object from ``before`` to the end."""

    message: Message
    ctx: Context | None = None
    outcome: str = ""  # acked | retried | poisoned | timed_out
    duration: float = 0.0
    error: BaseException | None = None
    reason: str = ""  # why it was poisoned
    retry_in: float | None = None
    #: Free for hooks: e.g. a tracing span opened in ``before`` and closed in ``after``.
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def queue(self) -> str:
        return self.message.queue

    @property
    def task(self) -> str:
        return self.message.task


class Middleware:
    """Override any of ``before``, ``after``, ``on_retry``, ``on_poison`` (def or async def)."""

    def before(self, d: Delivery) -> Any:
        return None

    def after(self, d: Delivery) -> Any:
        return None

    def on_retry(self, d: Delivery) -> Any:
        return None

    def on_poison(self, d: Delivery) -> Any:
        return None


class Hooks:
    """The middleware chain the dispatcher calls. Only overridden methods are called, so a chain
    without ``before`` hooks costs nothing before a handler runs."""

    def __init__(self, middleware: list[Middleware]) -> None:
        self._calls: dict[str, list[tuple[Callable[[Delivery], Any], bool]]] = {name: [] for name in METHODS}
        for mw in middleware:
            if not isinstance(mw, Middleware):
                raise TypeError(
                    f"{mw!r} is not a daemon.Middleware: subclass it and override before/after/on_retry/on_poison"
                )
            for name in METHODS:
                if getattr(type(mw), name) is not getattr(Middleware, name):
                    fn = getattr(mw, name)
                    self._calls[name].append((fn, inspect.iscoroutinefunction(fn)))
        self._open: dict[int, Delivery] = {}
        #: Methods whose hooks are all plain ``def``: the runner calls them inline (``before_now``, ``acked_now``), so
        #: a message costs no coroutine per hook call (the daemon's own observers are all plain ``def``).
        self.inline = {name: not any(is_async for _, is_async in self._calls[name]) for name in METHODS}

    def _delivery(self, m: Message) -> Delivery:
        """The open delivery of ``m``, made on first use (not a new one per call thrown away by setdefault)."""
        d = self._open.get(id(m))
        if d is None:
            d = self._open[id(m)] = Delivery(m)
        return d

    async def before(self, m: Message, ctx: Context) -> None:
        d = self._delivery(m)
        d.ctx = ctx
        await self._call("before", d)

    def before_now(self, m: Message, ctx: Context) -> None:
        """``before`` when ``inline["before"]``: the same calls, none awaited."""
        d = self._delivery(m)
        d.ctx = ctx
        self._call_now("before", d)

    def acked_now(self, m: Message, duration: float) -> None:
        """``outcome("acked", handled=True)`` when ``inline["after"]``: the same calls, none awaited."""
        d = self._delivery(m)
        d.outcome, d.duration, d.reason, d.retry_in = "acked", duration, "", None
        self._call_now("after", d)

    async def outcome(
        self,
        outcome: str,
        m: Message,
        duration: float,
        *,
        handled: bool,
        error: BaseException | None = None,
        reason: str = "",
        retry_in: float | None = None,
    ) -> None:
        """An outcome: ``after`` if a handler ran (``handled``), then ``on_retry``/``on_poison``."""
        d = self._delivery(m)
        d.outcome, d.duration, d.error, d.reason, d.retry_in = outcome, duration, error or d.error, reason, retry_in
        if handled:
            await self._call("after", d)
        if outcome == "retried":
            await self._call("on_retry", d)
        elif outcome == "poisoned":
            await self._call("on_poison", d)

    def forget(self, m: Message) -> None:
        """The delivery is over (called once per message task)."""
        self._open.pop(id(m), None)

    async def _call(self, name: str, d: Delivery) -> None:
        for fn, is_async in self._calls[name]:
            try:
                result = fn(d)
                if is_async:
                    await result
            except Exception as exc:  # a hook never changes what happens to the message
                _failed(fn, name, d, exc)

    def _call_now(self, name: str, d: Delivery) -> None:
        for fn, _ in self._calls[name]:
            try:
                fn(d)
            except Exception as exc:  # a hook never changes what happens to the message
                _failed(fn, name, d, exc)


def _failed(fn: Callable[[Delivery], Any], name: str, d: Delivery, exc: Exception) -> None:
    log.error(
        "hook_failed",
        hook=getattr(fn, "__qualname__", repr(fn)),
        method=name,
        queue=d.queue,
        task=d.task,
        id=str(d.message.id),
        error=f"{type(exc).__name__}: {exc}",
    )
