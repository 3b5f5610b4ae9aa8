"""The console as one ASGI app: ``build_console(cq, settings)`` gives a Starlette app that
``casque web`` serves alone and ``casque serve`` can mount beside the SQS endpoint.

Every request is authenticated (basic auth or bearer; auth.py); every POST also needs the CSRF
token and a same-origin request, and the admin role. Errors a user can cause come back as the page
with one line naming the problem (400/404/503), never a traceback; the server keeps serving.
Every response, whatever answers it, forbids framing and sniffing (headers.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from daemon.base.config import ConsoleSettings
from daemon.base.errors import CasqueError, MessageNotFound, QueueNotFound, StorageUnavailable
from daemon.base.logs import get_logger
from daemon.engine.client import Casque
from daemon.http.console import actions, pages
from daemon.http.console.auth import REALM, Auth, User, csrf_ok, same_origin
from daemon.http.console.headers import Console
from daemon.http.console.present import FILTERS

HERE = Path(__file__).resolve().parent
log = get_logger("casque.console")


def build_console(cq: Casque, settings: ConsoleSettings) -> Starlette:
    """The console app for a connected client. Raises ConfigError when no password is set."""
    auth = Auth(settings)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters.update(FILTERS)
    routes = [
        Route("/", pages.home),
        Route("/queues", pages.queues, methods=["GET"]),
        Route("/queues", actions.create_queue, methods=["POST"]),
        Route("/queues/{queue}", pages.queue),
        Route("/queues/{queue}/chart.svg", pages.chart),
        Route("/queues/{queue}/messages/{id}", pages.message),
        Route("/queues/{queue}/messages/{id}/cancel", actions.cancel_message, methods=["POST"]),
        Route("/queues/{queue}/send", actions.send_test, methods=["POST"]),
        Route("/queues/{queue}/purge", actions.purge_queue, methods=["POST"]),
        Route("/queues/{queue}/poison", pages.poison),
        Route("/queues/{queue}/poison/replay", actions.replay_poison, methods=["POST"]),
        Route("/queues/{queue}/poison/purge", actions.purge_poison, methods=["POST"]),
        Route("/queues/{queue}/poison/{id}", pages.poisoned),
        Route("/queues/{queue}/schedules", pages.schedules),
        Route("/queues/{queue}/schedules/cancel", actions.cancel_schedule, methods=["POST"]),
        Route("/daemons", pages.daemons),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Console(
        routes=routes,
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=_guard(auth))],
        exception_handlers={CasqueError: _error_page},
    )
    app.state.cq = cq
    app.state.settings = settings
    app.state.templates = templates
    return app


def _guard(auth: Auth) -> Callable[[Request, RequestResponseEndpoint], Awaitable[Response]]:
    async def guard(request: Request, call_next: RequestResponseEndpoint) -> Response:
        user = auth.identify(request.headers.get("authorization"))
        if user is None:
            return PlainTextResponse(
                "casque console: log in as admin or viewer (console.admin_password / console.viewer_password)\n",
                status_code=401,
                headers={"WWW-Authenticate": REALM},
            )
        request.state.user = user
        if request.method not in ("GET", "HEAD"):
            refusal = await _refuse_action(request, user)
            if refusal is not None:
                log.warning("console_action_refused", user=user.name, path=request.url.path, reason=refusal)
                return PlainTextResponse(f"casque console: {refusal}\n", status_code=403)
        return await call_next(request)

    return guard


async def _refuse_action(request: Request, user: User) -> str | None:
    if not user.can_act:
        return "the viewer role is read-only: log in as admin to act"
    if not same_origin(dict(request.headers), request.headers.get("host", "")):
        return "cross-site request refused: act from the console's own pages"
    token = request.headers.get("x-csrf-token")
    if token is None:
        await request.body()  # cached, so the endpoint can still read the form after this
        form = await request.form()
        token = str(form.get("csrf") or "")
    if not csrf_ok(user, token):
        return "missing or wrong CSRF token: reload the page and try again"
    return None


async def _error_page(request: Request, exc: Exception) -> Response:
    status = (
        404
        if isinstance(exc, (QueueNotFound, MessageNotFound))
        else 503
        if isinstance(exc, StorageUnavailable)
        else 400
    )
    log.info("console_error", path=request.url.path, status=status, error=str(exc))
    return pages.render(request, "error.html", {"error": str(exc)}, status=status)
