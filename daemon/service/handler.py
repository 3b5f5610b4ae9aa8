"""What a handler author sees: the ``Handler`` base class, the ``Context`` of one delivery, the
``Backoff`` policy, and the two exceptions a handler may raise to steer its message.

    from daemon import Handler, Retry, Poison, register

    @register("send_email", queue="emails", max_attempts=5, timeout=30)
    class SendEmail(Handler):
        async def handle(self, ctx, payload):
            ctx.log.info("sending", to=payload["to"])
            ...                                  # return normally: the message is acked

``handle`` may be ``async def`` (runs on the loop) or a plain ``def`` (runs in a bounded thread
pool, so it never blocks the loop). Raise ``Retry(after=60)`` to try again later, ``Poison(...)`` to
give up now; any other exception retries with the class's backoff until its last attempt, then
poisons the message with the exception's type, text and traceback.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

from daemon.base.model import out_of_attempts


class Retry(Exception):
    """Raise from a handler to run the message again after ``after`` seconds (counts an attempt)."""

    def __init__(self, after: float = 0.0, reason: str = "") -> None:
        super().__init__(reason or f"retry requested in {after}s")
        self.after = float(after)


class Poison(Exception):
    """Raise from a handler to move the message to the poison queue at once, with this reason."""


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter: attempt n waits uniform(0, min(cap, base * factor**(n-1)))
    when ``jitter`` is on, so a burst of failures does not retry in lockstep."""

    base: float = 1.0
    factor: float = 2.0
    cap: float = 300.0
    jitter: bool = True

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        ceiling = min(self.cap, self.base * self.factor ** max(0, attempt - 1))
        return (rng or random).uniform(0, ceiling) if self.jitter else ceiling


class Context:
    """One delivery of one message, as the handler sees it.

    ``id``, ``due`` and ``fire_time`` are made on first read: most handlers read none of them, and
    the string of a UUID and two datetimes per message are a cost paid on every delivery."""

    def __init__(
        self,
        *,
        id: str | uuid.UUID,
        queue: str,
        task: str,
        attempt: int,
        max_attempts: int,
        due_ms: int,
        key: str | None,
        headers: dict[str, str],
        log: Any,
        extend: Callable[[float], Awaitable[None]],
        trigger: dict[str, Any] | None = None,
    ) -> None:
        self._id = id
        self.queue = queue
        self.task = task
        self.attempt = attempt
        self.max_attempts = max_attempts
        self._due_ms = due_ms
        self.key = key
        self.headers = headers
        self.log = log
        self._extend = extend
        self._trigger = trigger
        #: For an occurrence of a schedule: its number (1-based) and scheduled fire time.
        self.occurrence: int | None = trigger.get("n") if trigger else None

    @property
    def id(self) -> str:
        """The message id, as a string."""
        if not isinstance(self._id, str):
            self._id = str(self._id)
        return self._id

    @property
    def due(self) -> datetime:
        """When the message was due (for an occurrence of a schedule: its fire time)."""
        return datetime.fromtimestamp(self._due_ms / 1000, tz=UTC)

    @property
    def fire_time(self) -> datetime | None:
        """A schedule's occurrence: when it was scheduled to fire (None for any other message)."""
        t = self._trigger
        return datetime.fromtimestamp(t["fire_ms"] / 1000, tz=UTC) if t and t.get("fire_ms") else None

    @property
    def last_attempt(self) -> bool:
        return out_of_attempts(self.attempt, self.max_attempts)

    async def extend(self, seconds: float) -> None:
        """Keep this message invisible for ``seconds`` more from now (for long work): moves its
        timeout column and the handler's own deadline. Sync handlers can't call it (no loop)."""
        await self._extend(seconds)


class Handler:
    """Base class for handlers. Options (class attributes; ``register`` may set them too):
    ``timeout`` (seconds; default: the message's timeout), ``max_attempts`` (default: the
    message's), ``backoff``, ``concurrency`` (at most this many running at once in one daemon),
    ``queue`` (a daemon started without ``--queues`` or ``worker.queues`` serves the queues its
    handlers name; default "default")."""

    task: ClassVar[str] = ""
    queue: ClassVar[str] = "default"
    timeout: ClassVar[float | None] = None
    max_attempts: ClassVar[int | None] = None
    backoff: ClassVar[Backoff] = Backoff()
    concurrency: ClassVar[int | None] = None

    def handle(self, ctx: Context, payload: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__}.handle is not implemented")
