"""What ``casque serve`` serves: the SQS endpoint at ``/``, and with ``--console`` the operators'
console at ``/console`` on the same port, so one process (and one systemd unit) gives clients
their API and operators their pages. SQS never uses ``/console``: its queue URLs are
``/<account>/<queue>``.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.responses import RedirectResponse
from starlette.routing import Mount, Route

from daemon.base.config import ConsoleSettings, SqsSettings
from daemon.engine.client import Casque
from daemon.http.console import build_console
from daemon.http.console.headers import SecurityHeaders
from daemon.http.sqs import build_app

CONSOLE_PATH = "/console"


def build_serve_app(cq: Casque, sqs: SqsSettings, console: ConsoleSettings | None = None) -> Starlette:
    """The SQS app, with the console mounted beside it when ``console`` is given."""
    sqs_app = build_app(cq, sqs)
    if console is None:
        return sqs_app
    # "/console" without its slash would fall through to the SQS app (its Mount("/") takes every path): it is the
    # console's, a redirect with the console's headers
    to_console = SecurityHeaders(RedirectResponse(CONSOLE_PATH + "/"))
    return Starlette(
        routes=[
            Route(CONSOLE_PATH, endpoint=to_console),
            Mount(CONSOLE_PATH, app=build_console(cq, console)),
            Mount("/", app=sqs_app),
        ]
    )
