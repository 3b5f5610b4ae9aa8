"""The task registry: the only way a task name in a message becomes code.

A message carries a task *name*. The daemon looks the name up in this dictionary of classes that
were registered in code (by ``@register`` in a module the config names). Nothing in a message is
ever imported, resolved as a dotted path or called: ``os:system`` or ``builtins.eval`` are just
unknown names, and unknown names go to the poison queue.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from daemon.base.errors import ConfigError, UsageError
from daemon.service.handler import Backoff, Handler
from daemon.service.hooks import Middleware

H = TypeVar("H", bound=type[Handler])
_NAME = re.compile(r"^[A-Za-z0-9_.:\-/]{1,200}$")


@dataclass(frozen=True)
class TaskSpec:
    """A registered task: its class and the options the dispatcher applies."""

    name: str
    cls: type[Handler]
    queue: str
    timeout: float | None
    max_attempts: int | None
    backoff: Backoff
    concurrency: int | None
    is_async: bool = False


class Registry:
    def __init__(self) -> None:
        self._tasks: dict[str, TaskSpec] = {}
        #: Middleware added with ``use``, run around every handler of a daemon using this registry.
        self.middleware: list[Middleware] = []

    def use(self, middleware: Middleware) -> Middleware:
        """Add middleware (hooks.py) to every daemon that uses this registry; returns it."""
        if not isinstance(middleware, Middleware):
            raise UsageError(
                f"{middleware!r} is not a daemon.Middleware: subclass it and override before/after/on_retry/on_poison"
            )
        if middleware not in self.middleware:
            self.middleware.append(middleware)
        return middleware

    def register(self, name: str | None = None, **options: Any) -> Callable[[H], H]:
        """Class decorator: register ``cls`` under ``name`` (default: ``cls.task``), with options."""

        def wrap(cls: H) -> H:
            self.add(cls, name, **options)
            return cls

        return wrap

    def add(self, cls: type[Handler], name: str | None = None, **options: Any) -> TaskSpec:
        if not (isinstance(cls, type) and issubclass(cls, Handler)):
            raise UsageError(f"{cls!r} is not a Handler subclass: handlers must subclass daemon.Handler")
        task = name or cls.task
        if not task or not _NAME.match(task):
            raise UsageError(f"invalid task name {task!r} for {cls.__qualname__}: use 1-200 of A-Z a-z 0-9 _ . : - /")
        unknown = set(options) - {"queue", "timeout", "max_attempts", "backoff", "concurrency"}
        if unknown:
            raise UsageError(f"unknown handler option(s) {', '.join(sorted(unknown))} for task {task!r}")
        existing = self._tasks.get(task)
        if existing and existing.cls is not cls:
            raise UsageError(
                f"task {task!r} is registered twice ({existing.cls.__qualname__} and {cls.__qualname__}): give one of "
                f"them another name"
            )
        spec = TaskSpec(
            name=task,
            cls=cls,
            queue=options.get("queue", cls.queue),
            timeout=options.get("timeout", cls.timeout),
            max_attempts=options.get("max_attempts", cls.max_attempts),
            backoff=options.get("backoff", cls.backoff),
            concurrency=options.get("concurrency", cls.concurrency),
            is_async=inspect.iscoroutinefunction(cls.handle),
        )
        self._tasks[task] = spec
        return spec

    def get(self, name: str) -> TaskSpec | None:
        """Look a task name up. Never imports anything."""
        return self._tasks.get(name)

    def names(self) -> list[str]:
        return sorted(self._tasks)

    def queues(self) -> list[str]:
        """The queues the registered handlers name: what a daemon serves when no queues are given."""
        return sorted({spec.queue for spec in self._tasks.values()})

    def load_modules(self, modules: list[str]) -> None:
        """Import the handler modules named in *config* (an operator's choice, never a message's)."""
        for module in modules:
            try:
                importlib.import_module(module)
            except Exception as exc:
                raise ConfigError(
                    f"worker.handler_modules: cannot import {module!r} ({type(exc).__name__}: {exc}): check the name "
                    f"and PYTHONPATH"
                ) from None


registry = Registry()
register = registry.register
use = registry.use
