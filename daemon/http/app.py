"""What ``casque serve`` serves: the SQS endpoint at ``/``, and with ``--console`` the operators'
console at ``/console`` on the same port, so one process (and one systemd unit) gives clients
their API and operators their pages. SQS never uses ``/console``: its queue URLs are
``/<account>/<queue>``.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.responses import RedirectResponse
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from daemon.base.config import ConsoleSettings, SqsSettings
from daemon.engine.client import Casque
from daemon.http.console import build_console
from daemon.http.console.headers import SecurityHeaders
from daemon.http.sqs import build_app

CONSOLE_PATH = "/console"


def build_serve_app(cq: Casque, sqs: SqsSettings, console: ConsoleSettings | None = None) -> ASGIApp:
    """The SQS app, with the console beside it when ``console`` is given: the console's paths go to it, every other
    path straight to the SQS app (no router between a parked long poll and its endpoint: build_app says why)."""
    sqs_app = build_app(cq, sqs)
    if console is None:
        return sqs_app
    # "/console" without its slash is the console's too: a redirect with the console's headers
    to_console = SecurityHeaders(RedirectResponse(CONSOLE_PATH + "/"))
    console_app = Starlette(
        routes=[Route(CONSOLE_PATH, endpoint=to_console), Mount(CONSOLE_PATH, app=build_console(cq, console))]
    )

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if path == CONSOLE_PATH or path.startswith(CONSOLE_PATH + "/"):
            await console_app(scope, receive, send)
        else:
            await sqs_app(scope, receive, send)

    return app
