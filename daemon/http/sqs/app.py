"""The SQS endpoint as an ASGI app: ``build_app(cq, settings)`` gives the app that ``casque serve``
serves alone or beside the web console.

Every request: read the body (at most ``MAX_REQUEST_BYTES``), pick the protocol from the headers,
verify the signature (``sqs.auth = "sigv4"``), run the action, answer in the caller's protocol.
Bad input of any kind gets SQS's error in that protocol and changes nothing; an unexpected fault
is logged and answered with InternalError, and the server keeps serving everything else.
"""

from __future__ import annotations

from contextvars import ContextVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from daemon.base.config import SqsSettings
from daemon.base.errors import CasqueError, StorageUnavailable, UsageError
from daemon.base.logs import get_logger
from daemon.engine.client import Casque
from daemon.http.sqs import wire
from daemon.http.sqs.actions import Call, SqsService
from daemon.http.sqs.auth import Authenticator
from daemon.http.sqs.errors import SqsError

log = get_logger("casque.sqs")
# 10 entries x 1 MiB bodies is refused by SQS's own batch limit; the envelope (base64 binary
# attributes, JSON escapes, form encoding) can be a few times the payload.
MAX_REQUEST_BYTES = 8 * 1024 * 1024
#: The SQS call this task serves: (action, request id), set while the action runs (tasks it starts
#: inherit it). A supported observation point, like ``Database.observe``: bench/sqs_cql_serve.py charges
#: each CQL request to the call that caused it, and a client finds its call by the RequestId it got back.
SERVING: ContextVar[tuple[str, str] | None] = ContextVar("casque_sqs_serving", default=None)


def build_app(cq: Casque, settings: SqsSettings | None = None) -> ASGIApp:
    """The SQS ASGI app on a connected client: every path is SQS's (queue URLs are ``/<account>/<queue>``).

    A plain ASGI callable rather than a Starlette app with one route: a long poll stays parked up to 20 s, and each
    layer of middleware, router and route is a coroutine and closures held that long, which CPython's collector
    walks at every full collection (docs/design.md, "Long polls").
    """
    settings = settings or cq.settings.sqs
    service = SqsService(cq, settings)
    auth = Authenticator(cq, settings)

    async def endpoint(request: Request) -> Response:
        request_id = wire.new_request_id()
        use_json = request.method == "POST" and wire.is_json(request.headers)  # a GET is always the query protocol
        action = "?"
        try:
            body = await _read_body(request)
            principal = await auth.verify(request, body)
            if use_json:
                action, params = wire.parse_json(request.headers, body)
            else:
                action, params = wire.parse_query(
                    request.url.query, body if request.method == "POST" else b"", get=request.method == "GET"
                )
            path = request.url.path.strip("/")
            base_url = f"{request.url.scheme}://{request.headers.get('host', request.url.netloc)}"
            call = Call(
                params,
                base_url,
                path.rsplit("/", 1)[-1] if "/" in path else None,
                principal,
                request.headers.get("x-amzn-trace-id"),
                source_ip=request.client.host if request.client else "",
                secure=request.url.scheme == "https",
            )
            token = SERVING.set((action, request_id))
            try:
                result = await service.run(action, call)
            finally:
                SERVING.reset(token)
            status, headers, out = (
                wire.json_ok(result, request_id) if use_json else wire.xml_ok(action, result, request_id)
            )
        except Exception as exc:  # every failure becomes the protocol's error; the server goes on
            err = _as_sqs_error(exc, action)
            status, headers, out = wire.json_error(err, request_id) if use_json else wire.xml_error(err, request_id)
        return Response(out, status_code=status, headers=headers)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # a WebSocket is refused; lifespan: nothing to start (served with it off)
            if scope["type"] == "websocket":
                await send({"type": "websocket.close"})
            return
        request = Request(scope, receive)
        if request.method in ("GET", "POST"):
            response = await endpoint(request)
        else:
            response = Response("Method Not Allowed", 405, {"Allow": "GET, POST"}, media_type="text/plain")
        await response(scope, receive, send)

    return app


async def _read_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_REQUEST_BYTES:
        raise SqsError("RequestEntityTooLarge", f"The request is larger than {MAX_REQUEST_BYTES} bytes.")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_REQUEST_BYTES:
            raise SqsError("RequestEntityTooLarge", f"The request is larger than {MAX_REQUEST_BYTES} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


def _as_sqs_error(exc: Exception, action: str) -> SqsError:
    if isinstance(exc, SqsError):
        return exc
    if isinstance(exc, StorageUnavailable):
        log.error("sqs_storage_unavailable", action=action, error=str(exc))
        return SqsError("ServiceUnavailable", str(exc))
    if isinstance(exc, UsageError):
        return SqsError("InvalidParameterValue", str(exc))
    if isinstance(exc, CasqueError):
        return SqsError("InternalError", str(exc))
    log.exception("sqs_internal_error", action=action, error=repr(exc))
    return SqsError("InternalError", "We encountered an internal error. Please try again.")
