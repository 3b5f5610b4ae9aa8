"""The operators' web console: server-rendered pages (Starlette, Jinja2, htmx) over a connected
``Casque``. ``build_console(cq, settings.console)`` returns the ASGI app; ``casque web`` serves it
alone, ``casque serve`` can mount it beside the SQS endpoint."""

from daemon.http.console.app import build_console

__all__ = ["build_console"]
