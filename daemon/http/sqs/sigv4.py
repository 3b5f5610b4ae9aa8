"""AWS Signature Version 4, the pure part: parse the Authorization header, rebuild the canonical
request from what arrived, and derive the signature. No I/O and no key lookup (auth.py does those),
so each rule here can be read against the SigV4 specification line by line.

What the canonical request binds is what the server will act on: the method, the path (the queue,
when the URL names it), the query string, every header the client listed in SignedHeaders, and the
SHA-256 of the body *as received*. The body's hash is always computed here; a client's
``X-Amz-Content-SHA256`` header is only ever compared with it (auth.py), never trusted in its place:
trusting it let a captured request be replayed with another body.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import hashlib
import hmac
import posixpath
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote

from daemon.http.sqs.errors import SqsError

ALGORITHM = "AWS4-HMAC-SHA256"
ISO_BASIC = "%Y%m%dT%H%M%SZ"
_FIELD = re.compile(r"\s*([A-Za-z]+)=([^,\s]*)\s*")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
# Names must be lowercase header tokens (RFC 9110); anything else cannot be signed by an SDK.
_HEADER_NAME = re.compile(r"^[a-z0-9!#$%&'*+.^_`|~-]+$")


@dataclass(frozen=True)
class Authorization:
    """The parts of ``Authorization: AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...``."""

    key_id: str
    day: str
    region: str
    service: str
    terminator: str
    signed_headers: tuple[str, ...]
    signature: str

    @property
    def scope(self) -> str:
        return f"{self.day}/{self.region}/{self.service}/{self.terminator}"


def incomplete(message: str) -> SqsError:
    return SqsError("IncompleteSignature", message)


def parse_authorization(header: str) -> Authorization:
    """The header's fields, or IncompleteSignature worded as AWS words it for each missing part."""
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise incomplete(
            f"Unsupported AWS 'algorithm': '{algorithm}'. casque verifies {ALGORITHM} (Signature Version 4) only."
        )
    fields: dict[str, str] = {}
    for part in rest.split(","):
        m = _FIELD.fullmatch(part)
        if not m or m.group(1) in fields:
            raise incomplete(
                f"Authorization header is malformed near {part.strip()[:40]!r}: "
                "expected Credential=..., SignedHeaders=..., Signature=..."
            )
        fields[m.group(1)] = m.group(2)
    for name in ("Credential", "Signature", "SignedHeaders"):
        if not fields.get(name):
            raise incomplete(f"Authorization header requires '{name}' parameter.")
    credential = fields["Credential"].split("/")
    if len(credential) != 5 or not all(credential):
        raise incomplete(
            "Authorization header requires a 'Credential' of the form KEY_ID/YYYYMMDD/REGION/SERVICE/aws4_request."
        )
    if not _HEX64.match(fields["Signature"]):
        raise incomplete("Authorization header requires 'Signature' to be 64 lowercase hexadecimal digits.")
    names = tuple(fields["SignedHeaders"].split(";"))
    if not all(_HEADER_NAME.match(n) for n in names):
        raise incomplete(
            "Authorization header requires 'SignedHeaders' to list lowercase header names separated by ';'."
        )
    key_id, day, region, service, terminator = credential
    return Authorization(key_id, day, region, service, terminator, names, fields["Signature"])


def request_time(headers: Any, signed: tuple[str, ...]) -> tuple[str, dt.datetime]:
    """The request's time as (ISO 8601 basic, datetime): from X-Amz-Date, else from Date (both
    are SigV4's; X-Amz-Date wins when both are present). The header used must be signed, or an
    attacker could re-date a captured request."""
    raw, name = headers.get("x-amz-date"), "x-amz-date"
    if raw is None:
        raw, name = headers.get("date"), "date"
    if raw is None:
        raise incomplete("Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.")
    if name not in signed:
        raise incomplete(
            f"'{'X-Amz-Date' if name == 'x-amz-date' else 'Date'}' must be a 'SignedHeader' in the AWS Authorization."
        )
    try:
        when = (
            dt.datetime.strptime(raw, ISO_BASIC).replace(tzinfo=dt.UTC)
            if name == "x-amz-date"
            else _utc(email.utils.parsedate_to_datetime(raw))
        )
    except (ValueError, TypeError):
        raise incomplete(
            f"The {name} header {raw[:40]!r} is not a valid date (X-Amz-Date: YYYYMMDD'T'HHMMSS'Z')."
        ) from None
    return when.strftime(ISO_BASIC), when


def canonical_request(
    method: str, raw_path: str, query: str, headers: Any, signed: tuple[str, ...], payload_hash: str
) -> str:
    """SigV4's canonical request for a non-S3 service (path normalized, then URI-encoded again)."""
    path = quote(_normalize(raw_path or "/"), safe="/~")
    pairs = parse_qsl(query, keep_blank_values=True)
    canonical_query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(pairs))
    lines = "".join(f"{n}:{' '.join(','.join(headers.getlist(n)).split())}\n" for n in signed)
    return "\n".join([method.upper(), path, canonical_query, lines, ";".join(signed), payload_hash])


def string_to_sign(amz_date: str, scope: str, canonical: str) -> str:
    return "\n".join([ALGORITHM, amz_date, scope, hashlib.sha256(canonical.encode("utf-8")).hexdigest()])


def signature(secret: str, auth: Authorization, to_sign: str) -> str:
    """HMAC-SHA256 of the string to sign, keyed by the key derived from secret, day, region, service."""
    k = hmac.new(f"AWS4{secret}".encode(), auth.day.encode(), hashlib.sha256).digest()
    for part in (auth.region, auth.service, auth.terminator):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return hmac.new(k, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


def _utc(when: dt.datetime) -> dt.datetime:
    """An RFC 1123 date as UTC ('-0000' and 'GMT' parse without a zone: they mean UTC)."""
    return when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)


def _normalize(path: str) -> str:
    normalized = posixpath.normpath(path) if path not in ("", "/") else "/"
    if normalized.startswith("//"):  # posixpath keeps a leading '//' (POSIX allows it); URIs don't
        normalized = "/" + normalized.lstrip("/")
    if path.endswith("/") and normalized != "/":
        normalized += "/"
    return normalized
