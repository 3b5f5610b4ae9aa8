"""Request authentication for the SQS endpoint.

``sqs.auth = "none"`` (the default, for local use on 127.0.0.1) accepts every request.
``sqs.auth = "sigv4"`` verifies AWS Signature Version 4 (the Authorization header every AWS SDK
and the CLI send) against the access keys stored in Cassandra (``casque sqs-keys create``):
the canonical request is rebuilt from what arrived (method, path, query, the signed headers, the
body's SHA-256), and the signature must match the one derived from the key's secret, for a
request dated within 15 minutes. Errors are SQS's: MissingAuthenticationToken,
InvalidClientTokenId (unknown key), SignatureDoesNotMatch, RequestExpired.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import posixpath
import re
from urllib.parse import parse_qsl, quote

from starlette.requests import Request

from daemon.base.config import SqsSettings
from daemon.engine.access_keys import AccessKey, AccessKeyStore
from daemon.engine.client import Casque
from daemon.http.sqs.errors import SqsError

MAX_SKEW_S = 15 * 60
_AUTH = re.compile(r"^AWS4-HMAC-SHA256\s+Credential=([^,\s]+),\s*SignedHeaders=([^,\s]+),\s*Signature=([0-9a-f]{64})\s*$")


class Authenticator:
    def __init__(self, cq: Casque, settings: SqsSettings) -> None:
        self.mode = settings.auth
        self.keys = AccessKeyStore(cq.db, cq.settings.cassandra.keyspace, cq.clock)
        self.clock = cq.clock

    async def verify(self, request: Request, body: bytes) -> AccessKey | None:
        """The key that signed the request (None under ``sqs.auth = "none"``), or SQS's error."""
        if self.mode == "none":
            return None
        header = request.headers.get("authorization")
        if not header:
            raise SqsError("MissingAuthenticationToken", "Request is missing Authentication Token: sign it with SigV4 (an access key from 'casque sqs-keys create').")
        m = _AUTH.match(header)
        if not m:
            raise SqsError("IncompleteSignature", "The Authorization header is not a well-formed AWS4-HMAC-SHA256 signature.")
        credential, signed_headers, signature = m.groups()
        parts = credential.split("/")
        if len(parts) != 5 or parts[4] != "aws4_request":
            raise SqsError("IncompleteSignature", "The Credential scope must be KEY/DATE/REGION/SERVICE/aws4_request.")
        key_id, day, region, service, _ = parts
        key = await self.keys.get(key_id)
        if key is None:
            raise SqsError("InvalidClientTokenId", "The security token included in the request is invalid.")
        amz_date = request.headers.get("x-amz-date", "")
        self._check_date(amz_date, day)
        canonical = _canonical_request(request, signed_headers, body)
        scope = f"{day}/{region}/{service}/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        expected = hmac.new(_signing_key(key.secret, day, region, service), to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, signature):
            raise SqsError("SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.")
        return key

    def _check_date(self, amz_date: str, day: str) -> None:
        try:
            when = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
        except ValueError:
            raise SqsError("IncompleteSignature", "The request must carry an X-Amz-Date header (YYYYMMDDTHHMMSSZ).") from None
        if not amz_date.startswith(day):
            raise SqsError("SignatureDoesNotMatch", "The credential scope date does not match X-Amz-Date.")
        skew = abs(when.timestamp() - self.clock.now())
        if skew > MAX_SKEW_S:
            raise SqsError("RequestExpired", f"Request has expired: its X-Amz-Date is {int(skew)} s from the server's time (at most {MAX_SKEW_S} s).")


def _canonical_request(request: Request, signed_headers: str, body: bytes) -> str:
    raw_path = request.scope.get("raw_path", request.url.path.encode()).decode("latin-1") or "/"
    path = quote(_normalize(raw_path), safe="/~")
    pairs = parse_qsl(request.url.query, keep_blank_values=True)
    query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(pairs))
    names = signed_headers.split(";")
    lines = "".join(f"{n}:{' '.join(','.join(request.headers.getlist(n)).split())}\n" for n in names)
    payload = request.headers.get("x-amz-content-sha256") or hashlib.sha256(body).hexdigest()
    return "\n".join([request.method.upper(), path, query, lines, signed_headers, payload])


def _normalize(path: str) -> str:
    normalized = posixpath.normpath(path) if path not in ("", "/") else "/"
    if path.endswith("/") and normalized != "/":
        normalized += "/"
    return normalized


def _signing_key(secret: str, day: str, region: str, service: str) -> bytes:
    k = hmac.new(f"AWS4{secret}".encode(), day.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k
