"""A logger bound to one message, bound lazily."""

from __future__ import annotations

from typing import Any

from daemon.base.logs import get_logger
from daemon.base.model import Message

log = get_logger("casque.dispatcher")


class MessageLog:
    """A logger bound to one message, bound only when something is logged: most messages log
    nothing above debug, and binding costs more than the handler of a no-op task."""

    __slots__ = ("_m", "_bound")

    def __init__(self, m: Message) -> None:
        self._m = m
        self._bound: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._bound is None:
            m = self._m
            self._bound = log.bind(queue=m.queue, task=m.task, id=str(m.id), attempt=m.attempt)
        return getattr(self._bound, name)
