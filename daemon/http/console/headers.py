"""The headers every console response carries, whatever answered it: a page, an htmx fragment, a
static file, a redirect, a 401/403 from the guard, an error page, or Starlette's own 500.

- ``Content-Security-Policy: frame-ancestors 'none'`` and ``X-Frame-Options: DENY`` (for browsers
  without CSP level 2): no other site can put the console in a frame and trick an operator into
  clicking its buttons (clickjacking). Only ``frame-ancestors``: a ``script-src`` would need
  ``'unsafe-eval'`` for htmx's trigger filter (``[!document.hidden]`` in _live.html) and a
  ``style-src`` would block the indicator style htmx injects, so it would add little.
- ``X-Content-Type-Options: nosniff``: a payload shown as text is never run as a script or style.
- ``Referrer-Policy: same-origin``: no URL of the console (queue names, message ids) reaches
  another site. Not ``no-referrer``: under it a browser sends ``Origin: null`` with the console's
  own form posts, and the CSRF check (auth.py, ``same_origin``) refuses them.

Set in one place, outside all of the app's middleware (``Console.build_middleware_stack``), and
only on the console: the SQS endpoint beside it in ``casque serve`` answers SDKs, not browsers.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SECURITY_HEADERS = {
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


class SecurityHeaders:
    """ASGI middleware: adds ``SECURITY_HEADERS`` to every HTTP response of the app it wraps."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


class Console(Starlette):
    """Starlette with ``SecurityHeaders`` outermost, around its ServerErrorMiddleware too, so that
    even an unhandled error's 500 carries the headers (user middleware sits inside that one)."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())
