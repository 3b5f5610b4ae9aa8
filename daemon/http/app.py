"""What ``casque serve`` serves: the SQS endpoint at ``/``, and with ``--console`` the operators'
console at ``/console`` on the same port, so one process (and one systemd unit) gives clients
their API and operators their pages. SQS never uses ``/console``: its queue URLs are
``/<account>/<queue>``.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.routing import Mount

from daemon.base.config import ConsoleSettings, SqsSettings
from daemon.engine.client import Casque
from daemon.http.console import build_console
from daemon.http.sqs import build_app

CONSOLE_PATH = "/console"


def build_serve_app(cq: Casque, sqs: SqsSettings, console: ConsoleSettings | None = None) -> Starlette:
    """The SQS app, with the console mounted beside it when ``console`` is given."""
    sqs_app = build_app(cq, sqs)
    if console is None:
        return sqs_app
    return Starlette(routes=[Mount(CONSOLE_PATH, app=build_console(cq, console)), Mount("/", app=sqs_app)])
