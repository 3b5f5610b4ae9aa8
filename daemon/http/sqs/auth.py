"""Request authentication for the SQS endpoint.

``sqs.auth = "none"`` (the default, for local use on 127.0.0.1) accepts every request.
``sqs.auth = "sigv4"`` verifies AWS Signature Version 4 (the Authorization header every AWS SDK
and the CLI send) against the access keys stored in Cassandra (``casque sqs-keys create``).

A signature is accepted only if it binds everything the server acts on (sigv4.py rebuilds the
canonical request): method, path, query, every signed header, the body actually received, the
time (within 15 minutes of the server's clock), the key, this server's region and the ``sqs``
service. Checks run cheapest first, and the key is looked up in memory (engine/access/key_cache.py), so a
refused request costs no Cassandra read. Errors and their wording are AWS's own
(MissingAuthenticationToken, IncompleteSignature, InvalidClientTokenId, SignatureDoesNotMatch);
docs/security.md, "The SQS endpoint", says what is bound and what is not (replay within the window).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from urllib.parse import parse_qsl

from starlette.requests import Request

from daemon.base.config import SqsSettings
from daemon.engine.access.access_keys import AccessKey
from daemon.engine.access.key_cache import KeyCache
from daemon.engine.client import Casque
from daemon.http.sqs import sigv4
from daemon.http.sqs.errors import SqsError

MAX_SKEW = dt.timedelta(minutes=15)
SERVICE = "sqs"
TERMINATOR = "aws4_request"
#: X-Amz-Target names the JSON protocol's action and makes the body be read as JSON: present means
#: signed, or a captured body could be re-read as another action. (Content-Type need not be: the
#: PHP SDK leaves it unsigned, and without X-Amz-Target a body is only ever read as a form post.)
MUST_SIGN_IF_PRESENT = ("x-amz-target",)
_PRESIGNED = ("x-amz-algorithm", "x-amz-credential", "x-amz-signature", "x-amz-signedheaders")
_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
)


def mismatch(message: str = _MISMATCH) -> SqsError:
    return SqsError("SignatureDoesNotMatch", message)


class Authenticator:
    def __init__(self, cq: Casque, settings: SqsSettings) -> None:
        self.mode = settings.auth
        self.region = settings.region
        self.keys = KeyCache(cq.access_keys)
        self.clock = cq.clock

    async def verify(self, request: Request, body: bytes) -> AccessKey | None:
        """The key that signed the request (None under ``sqs.auth = "none"``), or SQS's error."""
        if self.mode == "none":
            return None
        _refuse_presigned(request.url.query)
        header = request.headers.get("authorization")
        if not header:
            raise SqsError("MissingAuthenticationToken", "Request is missing Authentication Token")
        auth = sigv4.parse_authorization(header)
        _check_signed_headers(request, auth)
        amz_date, when = sigv4.request_time(request.headers, auth.signed_headers)
        self._check_scope(auth, amz_date)
        self._check_time(amz_date, when)
        payload_hash = _payload_hash(request, body)
        _check_query(request.url.query)
        key = await self.keys.get(auth.key_id)
        if key is None:
            raise SqsError("InvalidClientTokenId", "The security token included in the request is invalid.")
        raw_path = request.scope.get("raw_path", request.url.path.encode()).decode("latin-1")
        canonical = sigv4.canonical_request(
            request.method, raw_path, request.url.query, request.headers, auth.signed_headers, payload_hash
        )
        expected = sigv4.signature(key.secret, auth, sigv4.string_to_sign(amz_date, auth.scope, canonical))
        if not hmac.compare_digest(expected, auth.signature):
            raise mismatch()
        return key

    def _check_scope(self, auth: sigv4.Authorization, amz_date: str) -> None:
        """Credential scope as AWS checks it: a signature made for another day, region or service is
        refused even though it is a valid HMAC (the scope is part of the signing key)."""
        if auth.terminator != TERMINATOR:
            raise mismatch(
                f"Credential should be scoped with a valid terminator: '{TERMINATOR}', not '{auth.terminator}'. "
            )
        if auth.day != amz_date[:8]:
            raise mismatch(
                f"Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: "
                f"'{auth.day}' != '{amz_date[:8]}', from '{amz_date}'."
            )
        if auth.region != self.region:
            raise mismatch(f"Credential should be scoped to a valid region, not '{auth.region}'. ")
        if auth.service != SERVICE:
            raise mismatch(f"Credential should be scoped to correct service: '{SERVICE}'. ")

    def _check_time(self, amz_date: str, when: dt.datetime) -> None:
        now = dt.datetime.fromtimestamp(self.clock.now(), dt.UTC).replace(microsecond=0)
        fmt = sigv4.ISO_BASIC
        if when < now - MAX_SKEW:
            raise mismatch(
                f"Signature expired: {amz_date} is now earlier than {(now - MAX_SKEW).strftime(fmt)} "
                f"({now.strftime(fmt)} - 15 min.)"
            )
        if when > now + MAX_SKEW:
            raise mismatch(
                f"Signature not yet current: {amz_date} is still later than {(now + MAX_SKEW).strftime(fmt)} "
                f"({now.strftime(fmt)} + 15 min.)"
            )


def _refuse_presigned(query: str) -> None:
    """Presigned URLs (SigV4 in the query string) are not verified by casque; refusing them
    outright means they can never stand in for the Authorization header."""
    if any(k.lower() in _PRESIGNED for k, _ in parse_qsl(query, keep_blank_values=True)):
        raise SqsError(
            "InvalidSecurity",
            "casque does not accept presigned (query-string) SigV4 requests: "
            "sign with the Authorization header, as the AWS SDKs and CLI do.",
        )


def _check_signed_headers(request: Request, auth: sigv4.Authorization) -> None:
    signed = set(auth.signed_headers)
    if "host" not in signed:
        raise sigv4.incomplete("'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.")
    for name in MUST_SIGN_IF_PRESENT:
        if name in request.headers and name not in signed:
            raise sigv4.incomplete(f"'{name}' is present, so it must be a 'SignedHeader' in the AWS Authorization.")
    absent = [n for n in auth.signed_headers if n not in request.headers]
    if absent:
        raise mismatch(f"The request does not carry the header(s) {', '.join(absent)} that its SignedHeaders list.")


def _payload_hash(request: Request, body: bytes) -> str:
    """The SHA-256 of the body received. A client's X-Amz-Content-SHA256 must equal it (signed or
    not); UNSIGNED-PAYLOAD and the streaming forms never do, so they are refused."""
    actual = hashlib.sha256(body).hexdigest()
    claimed = request.headers.get("x-amz-content-sha256")
    if claimed is not None and claimed.strip().lower() != actual:
        raise mismatch(
            "The provided 'x-amz-content-sha256' header does not match the SHA-256 of the request body received "
            "(casque signs and checks every SQS body; UNSIGNED-PAYLOAD is not accepted)."
        )
    return actual


def _check_query(query: str) -> None:
    """A parameter may appear once in the URL's query: SigV4 sorts the pairs, so the order of two
    values of one name is not signed, and the action reader keeps the last."""
    names = [k for k, _ in parse_qsl(query, keep_blank_values=True)]
    if len(names) != len(set(names)):
        raise SqsError(
            "InvalidQueryParameter",
            "The AWS query string is malformed or does not adhere to AWS standards: a parameter is repeated.",
        )
