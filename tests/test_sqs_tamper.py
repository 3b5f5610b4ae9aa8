"""SigV4 requests tampered with after signing, against a real ``casque serve --auth sigv4``.

Each request is signed by botocore's own signer (SigV4Auth; a subclass only picks the signing
time, the scope's day, or leaves a header unsigned), then one field is changed the way an attacker
holding a captured request would change it, in both protocols where the field exists: the form
post (query protocol) and JSON (X-Amz-Target). Each test asserts SQS's exact error code and HTTP
status, and that nothing changed: queue A still holds exactly its one original message and queue B
none, read back through an untampered, properly signed client.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import email.utils
import hashlib
import json
import os
import secrets
import shutil
import string
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from daemon.engine.access.key_cache import MISS_REFRESH_S, REFRESH_S
from daemon.engine.client import Casque
from daemon.http.sqs.messages import body_of
from daemon.testing import sqsserver
from tests.conftest import TEST_KEYSPACE
from tests.support import count_file
from tests.test_sqs_auth import casque, client

NS = {"q": "http://queue.amazonaws.com/doc/2012-11-05/"}
PROTOCOLS = ("query", "json")
ISO = "%Y%m%dT%H%M%SZ"


# --- signing and sending -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Wire:
    """A request exactly as it goes on the wire (what an attacker who captured it holds)."""

    method: str
    url: str
    headers: dict[str, str]
    body: bytes

    def header(self, name: str) -> str:
        return next(v for k, v in self.headers.items() if k.lower() == name.lower())

    def with_header(self, name: str, value: str | None) -> Wire:
        headers = {k: v for k, v in self.headers.items() if k.lower() != name.lower()}
        if value is not None:
            headers[name] = value
        return dataclasses.replace(self, headers=headers)

    def with_body(self, old: str, new: str) -> Wire:
        assert old.encode() in self.body, f"{old!r} not in {self.body!r}"
        return dataclasses.replace(self, body=self.body.replace(old.encode(), new.encode()))


class Signer(SigV4Auth):
    """botocore's SigV4 with a chosen signing time, credential-scope day, and headers left
    unsigned: every other step (canonical request, string to sign, key derivation) is botocore's."""

    def __init__(
        self,
        creds: Credentials,
        region: str = "us-east-1",
        service: str = "sqs",
        when: dt.datetime | None = None,
        day: str | None = None,
        unsigned: tuple[str, ...] = (),
    ) -> None:
        super().__init__(creds, service, region)
        self.when, self.day, self.unsigned = when, day, unsigned

    def add_auth(self, request: AWSRequest) -> None:
        request.context["timestamp"] = (self.when or dt.datetime.now(dt.UTC)).strftime(ISO)
        self._modify_request_before_signing(request)
        canonical = self.canonical_request(request)
        self._inject_signature_to_request(request, self.signature(self.string_to_sign(request, canonical), request))

    def headers_to_sign(self, request: AWSRequest) -> Any:
        headers = super().headers_to_sign(request)
        for name in self.unsigned:
            del headers[name]
        return headers

    def credential_scope(self, request: AWSRequest) -> str:
        return f"{self.day or request.context['timestamp'][:8]}/{self._region_name}/{self._service_name}/aws4_request"

    def scope(self, request: AWSRequest) -> str:
        return f"{self.credentials.access_key}/{self.credential_scope(request)}"

    def signature(self, string_to_sign: str, request: AWSRequest) -> str:
        k = self._sign(f"AWS4{self.credentials.secret_key}".encode(), self.day or request.context["timestamp"][:8])
        for part in (self._region_name, self._service_name, "aws4_request"):
            k = self._sign(k, part)
        return self._sign(k, string_to_sign, hex=True)


def signed(
    url: str,
    protocol: str,
    action: str,
    params: dict[str, str],
    creds: Credentials,
    extra: dict[str, str] | None = None,
    **signer: Any,
) -> Wire:
    """A POST of ``action`` in ``protocol``, signed as an SDK signs it."""
    if protocol == "query":
        body = urllib.parse.urlencode({"Action": action, "Version": "2012-11-05", **params}).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
    else:
        body = json.dumps(params).encode()
        headers = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{action}"}
    req = AWSRequest(method="POST", url=url, data=body, headers={**headers, **(extra or {})})
    Signer(creds, **signer).add_auth(req)
    prepared = req.prepare()
    return Wire(
        "POST",
        prepared.url,
        {k: v for k, v in prepared.headers.items() if k.lower() != "content-length"},
        prepared.body,
    )


@dataclasses.dataclass
class Answer:
    status: int
    code: str
    message: str


def send(w: Wire) -> Answer:
    req = urllib.request.Request(w.url, data=w.body if w.method == "POST" else None, headers=w.headers, method=w.method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return Answer(resp.status, "", "")
    except urllib.error.HTTPError as err:
        status, raw, headers = err.code, err.read(), err.headers
    if "x-amzn-query-error" in headers:
        return Answer(status, headers["x-amzn-query-error"].split(";")[0], json.loads(raw)["message"])
    root = ET.fromstring(raw)
    return Answer(status, root.findtext("q:Error/q:Code", "", NS), root.findtext("q:Error/q:Message", "", NS))


# --- the server, keys and queues -----------------------------------------------------------------


def make_key() -> Credentials:
    out = casque("sqs-keys", "create", "--description", "tamper test", "--json")
    assert out.returncode == 0, out.stderr
    created = json.loads(out.stdout)
    return Credentials(created["access_key_id"], created["secret_access_key"])


def drop_key(creds: Credentials) -> None:
    out = casque("sqs-keys", "delete", creds.access_key)
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def keys(settings: Any) -> Iterator[tuple[Credentials, Credentials]]:
    pair = (make_key(), make_key())
    yield pair
    for k in pair:
        drop_key(k)


@pytest.fixture(scope="module")
def server(keys: tuple[Credentials, Credentials]) -> Iterator[sqsserver.SqsServer]:
    srv = sqsserver.start(TEST_KEYSPACE, "--auth", "sigv4")
    yield srv
    srv.stop()


@dataclasses.dataclass
class Scene:
    url: str  # the server
    a: str  # queue A: holds one message, "original"
    b: str  # queue B: empty
    key: Credentials  # the key that signs
    other: Credentials  # another valid key
    sqs: Any  # an untampered, properly signed boto3 client
    engine: Engine

    def held(self, queue_url: str) -> list[str]:
        """Every message body the queue holds, read by the engine from every row of the queue
        (an SQS receive would hide them, and returns some of a sharded queue's messages only)."""
        found = self.engine.run(self.engine.cq.peek(queue_url.rsplit("/", 1)[-1], limit=50))
        return sorted(body_of(m) for m in found)

    def assert_unchanged(self) -> None:
        assert self.held(self.a) == ["original"], "queue A lost its message or got a forged one"
        assert self.held(self.b) == [], "queue B got a forged message"


@dataclasses.dataclass
class Engine:
    """A connected Casque on an event loop of its own, for these synchronous tests."""

    loop: asyncio.AbstractEventLoop
    cq: Casque

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)


@pytest.fixture(scope="module")
def engine(settings: Any) -> Iterator[Engine]:
    loop = asyncio.new_event_loop()
    e = Engine(loop, loop.run_until_complete(Casque.connect(settings)))
    yield e
    e.run(e.cq.close())
    loop.close()


@pytest.fixture
def scene(server: sqsserver.SqsServer, keys: tuple[Credentials, Credentials], engine: Engine) -> Iterator[Scene]:
    sqs = client(server.url, keys[0].access_key, keys[0].secret_key)
    tag = uuid.uuid4().hex[:8]
    a = sqs.create_queue(QueueName=f"tamper-a-{tag}")["QueueUrl"]
    b = sqs.create_queue(QueueName=f"tamper-b-{tag}")["QueueUrl"]
    sqs.send_message(QueueUrl=a, MessageBody="original")
    s = Scene(server.url, a, b, keys[0], keys[1], sqs, engine)
    assert s.held(a) == ["original"]
    yield s
    sqs.delete_queue(QueueUrl=a)
    sqs.delete_queue(QueueUrl=b)


# --- the tampered requests -----------------------------------------------------------------------


def send_a(
    s: Scene, protocol: str, creds: Credentials | None = None, extra: dict[str, str] | None = None, **signer: Any
) -> Wire:
    """SendMessage "hello" to queue A (QueueUrl as a parameter, posted to the server's root)."""
    return signed(
        s.url, protocol, "SendMessage", {"QueueUrl": s.a, "MessageBody": "hello"}, creds or s.key, extra, **signer
    )


def quoted(protocol: str, value: str) -> str:
    """How ``value`` appears in the body of a request of this protocol."""
    return urllib.parse.urlencode({"x": value})[2:] if protocol == "query" else json.dumps(value)


def body_param(s: Scene, p: str) -> Wire:
    return send_a(s, p).with_body(quoted(p, "hello"), quoted(p, "forged"))


def action(s: Scene, p: str) -> Wire:
    w = signed(s.url, p, "GetQueueAttributes", {"QueueUrl": s.a}, s.key)
    if p == "query":
        return w.with_body("Action=GetQueueAttributes", "Action=PurgeQueue")
    return w.with_header("X-Amz-Target", "AmazonSQS.PurgeQueue")


def queue_in_path(s: Scene, p: str) -> Wire:
    w = signed(s.a, p, "SendMessage", {"MessageBody": "hello"}, s.key)  # SQS's form: the queue is the URL
    return dataclasses.replace(w, url=s.b)


def queue_in_queue_url(s: Scene, p: str) -> Wire:
    return send_a(s, p).with_body(quoted(p, s.a), quoted(p, s.b))


def signed_header_changed(s: Scene, p: str) -> Wire:
    host = urllib.parse.urlsplit(s.url).netloc
    return send_a(s, p).with_header("Host", host.replace("127.0.0.1", "localhost"))


def signed_header_removed(s: Scene, p: str) -> Wire:
    return send_a(s, p, extra={"X-Request-Tag": "billing"}).with_header(
        "X-Request-Tag", None
    )  # any header the client signed


def unsigned_content_sha_lies(s: Scene, p: str) -> Wire:
    return send_a(s, p).with_header("X-Amz-Content-SHA256", hashlib.sha256(b"another body").hexdigest())


def signed_unsigned_payload(s: Scene, p: str) -> Wire:
    return send_a(s, p, extra={"X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"})  # a valid signature over UNSIGNED-PAYLOAD


def x_amz_date_changed(s: Scene, p: str) -> Wire:
    w = send_a(s, p)
    later = dt.datetime.strptime(w.header("X-Amz-Date"), ISO) + dt.timedelta(seconds=1)
    return w.with_header("X-Amz-Date", later.strftime(ISO))


def date_header_changed(s: Scene, p: str) -> Wire:
    w = send_a(s, p, extra={"Date": "any"})  # botocore then signs a Date header (now), not X-Amz-Date
    assert "X-Amz-Date" not in w.headers and ";date;" in w.header("Authorization")
    later = email.utils.parsedate_to_datetime(w.header("Date")).replace(tzinfo=dt.UTC) + dt.timedelta(seconds=1)
    return w.with_header("Date", email.utils.format_datetime(later, usegmt=True))


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def expired(s: Scene, p: str) -> Wire:
    return send_a(s, p, when=now() - dt.timedelta(minutes=16))


def future(s: Scene, p: str) -> Wire:
    return send_a(s, p, when=now() + dt.timedelta(minutes=16))


def scope_day_differs(s: Scene, p: str) -> Wire:
    return send_a(s, p, day=(now() - dt.timedelta(days=1)).strftime("%Y%m%d"))


def unknown_key(s: Scene, p: str) -> Wire:
    made_up = "CQ" + "".join(secrets.choice(string.ascii_uppercase + string.digits) for _ in range(18))
    return send_a(s, p, Credentials(made_up, "not-a-secret"))


def other_keys_id(s: Scene, p: str) -> Wire:
    w = send_a(s, p)
    return w.with_header("Authorization", w.header("Authorization").replace(s.key.access_key, s.other.access_key))


def region_signed(s: Scene, p: str) -> Wire:
    return send_a(s, p, region="eu-west-1")


def region_edited(s: Scene, p: str) -> Wire:
    w = send_a(s, p)
    return w.with_header("Authorization", w.header("Authorization").replace("/us-east-1/", "/eu-west-1/"))


def service_signed(s: Scene, p: str) -> Wire:
    return send_a(s, p, service="sns")


def host_not_signed(s: Scene, p: str) -> Wire:
    return send_a(s, p, unsigned=("host",))


def target_not_signed(s: Scene, p: str) -> Wire:
    return send_a(s, p, unsigned=("x-amz-target",))


def unsigned_request(s: Scene, p: str) -> Wire:
    return send_a(s, p).with_header("Authorization", None)


def malformed_authorization(s: Scene, p: str) -> Wire:
    w = send_a(s, p)
    return w.with_header("Authorization", w.header("Authorization").split(", Signature=")[0])


SIG = "SignatureDoesNotMatch"
MISMATCH = (SIG, 403, "The request signature we calculated does not match")
PAYLOAD = (SIG, 403, "The provided 'x-amz-content-sha256' header does not match")
REGION = (SIG, 403, "Credential should be scoped to a valid region, not 'eu-west-1'. ")
#: name -> (the tampering, protocols it applies to, (code, status, start of the message))
CASES: dict[str, tuple[Callable[[Scene, str], Wire], tuple[str, ...], tuple[str, int, str]]] = {
    "body_param": (body_param, PROTOCOLS, MISMATCH),
    "action": (action, PROTOCOLS, MISMATCH),
    "queue_in_path": (queue_in_path, PROTOCOLS, MISMATCH),
    "queue_in_queue_url": (queue_in_queue_url, PROTOCOLS, MISMATCH),
    "signed_header_changed": (signed_header_changed, PROTOCOLS, MISMATCH),
    "signed_header_removed": (
        signed_header_removed,
        PROTOCOLS,
        (SIG, 403, "The request does not carry the header(s) x-request-tag"),
    ),
    "unsigned_content_sha_lies": (unsigned_content_sha_lies, PROTOCOLS, PAYLOAD),
    "signed_unsigned_payload": (signed_unsigned_payload, PROTOCOLS, PAYLOAD),
    "x_amz_date_changed": (
        x_amz_date_changed,
        PROTOCOLS,
        (SIG, 403, ""),
    ),  # (the day's last second also changes the day)
    "date_header_changed": (date_header_changed, PROTOCOLS, (SIG, 403, "")),
    "expired": (expired, PROTOCOLS, (SIG, 403, "Signature expired: ")),
    "future": (future, PROTOCOLS, (SIG, 403, "Signature not yet current: ")),
    "scope_day_differs": (scope_day_differs, PROTOCOLS, (SIG, 403, "Date in Credential scope does not match YYYYMMDD")),
    "unknown_key": (
        unknown_key,
        PROTOCOLS,
        ("InvalidClientTokenId", 403, "The security token included in the request is invalid."),
    ),
    "other_keys_id": (other_keys_id, PROTOCOLS, MISMATCH),
    "region_signed": (region_signed, PROTOCOLS, REGION),
    "region_edited": (region_edited, PROTOCOLS, REGION),
    "service_signed": (
        service_signed,
        PROTOCOLS,
        (SIG, 403, "Credential should be scoped to correct service: 'sqs'. "),
    ),
    "host_not_signed": (
        host_not_signed,
        PROTOCOLS,
        ("IncompleteSignature", 400, "'Host' or ':authority' must be a 'SignedHeader'"),
    ),
    "target_not_signed": (
        target_not_signed,
        ("json",),
        ("IncompleteSignature", 400, "'x-amz-target' is present, so it must be"),
    ),
    "unsigned_request": (
        unsigned_request,
        PROTOCOLS,
        ("MissingAuthenticationToken", 403, "Request is missing Authentication Token"),
    ),
    "malformed_authorization": (
        malformed_authorization,
        PROTOCOLS,
        ("IncompleteSignature", 400, "Authorization header requires 'Signature' parameter"),
    ),
}


@pytest.mark.parametrize("name,protocol", [(n, p) for n, (_, ps, _) in CASES.items() for p in ps])
def test_tampered_request_is_refused_and_changes_nothing(scene: Scene, name: str, protocol: str) -> None:
    tamper, _, (code, status, message) = CASES[name]
    answer = send(tamper(scene, protocol))
    assert (answer.code, answer.status) == (code, status), answer
    assert answer.message.startswith(message), answer.message
    scene.assert_unchanged()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_untampered_requests_are_accepted(scene: Scene, protocol: str) -> None:
    """The same signing, unchanged, works (so the refusals above are the tampering's doing),
    with X-Amz-Date and with a signed Date header (SigV4 allows either)."""
    assert send(send_a(scene, protocol)).status == 200
    dated = send_a(scene, protocol, extra={"Date": "any"})  # botocore signs a Date header (now) instead
    assert "X-Amz-Date" not in dated.headers and send(dated).status == 200
    assert scene.held(scene.a) == ["hello", "hello", "original"]


def test_presigned_url_is_refused(scene: Scene) -> None:
    """SigV4 in the query string is refused outright, never verified partly."""
    req = AWSRequest(method="GET", url=f"{scene.a}?Action=PurgeQueue&Version=2012-11-05")
    SigV4QueryAuth(scene.key, "sqs", "us-east-1", expires=300).add_auth(req)
    answer = send(Wire("GET", req.prepare().url, {}, b""))
    assert (answer.code, answer.status) == ("InvalidSecurity", 403), answer
    scene.assert_unchanged()


def test_repeated_query_parameter_is_refused(scene: Scene) -> None:
    """SigV4 sorts the query's pairs, so which of two Action values comes last (the one the action
    reader keeps) is not signed: a query naming a parameter twice is refused even when signed."""
    req = AWSRequest(method="GET", url=f"{scene.a}?Action=GetQueueAttributes&Version=2012-11-05&Action=PurgeQueue")
    Signer(scene.key).add_auth(req)
    answer = send(Wire("GET", req.prepare().url, dict(req.headers), b""))
    assert (answer.code, answer.status) == ("InvalidQueryParameter", 400), answer
    scene.assert_unchanged()


# --- the two attacks that were reported ----------------------------------------------------------


def test_replayed_get_queue_url_with_purge_body_and_its_content_hash_is_refused(scene: Scene) -> None:
    """Reported: a captured GetQueueUrl replayed with Action=PurgeQueue in its body and the original
    body's hash in X-Amz-Content-SHA256 was answered 200 and purged the queue."""
    name = scene.a.rsplit("/", 1)[-1]
    captured = signed(scene.url, "query", "GetQueueUrl", {"QueueName": name}, scene.key)
    forged_body = urllib.parse.urlencode(
        {"Action": "PurgeQueue", "Version": "2012-11-05", "QueueUrl": scene.a}
    ).encode()
    replay = dataclasses.replace(captured, body=forged_body).with_header(
        "X-Amz-Content-SHA256", hashlib.sha256(captured.body).hexdigest()
    )
    answer = send(replay)
    assert (answer.code, answer.status) == ("SignatureDoesNotMatch", 403), answer
    scene.assert_unchanged()
    assert send(captured).status == 200, (
        "the captured request itself is still accepted within its window (AWS's behaviour too)"
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_replayed_send_message_to_another_queue_with_another_body_is_refused(scene: Scene, protocol: str) -> None:
    """Reported: a captured SendMessage replayed with another queue and body stored the forged message."""
    captured = send_a(scene, protocol)
    forged = send_a(scene, protocol).with_body(quoted(protocol, scene.a), quoted(protocol, scene.b))
    forged = forged.with_body(quoted(protocol, "hello"), quoted(protocol, "forged"))
    replay = dataclasses.replace(captured, body=forged.body).with_header(
        "X-Amz-Content-SHA256", hashlib.sha256(captured.body).hexdigest()
    )
    answer = send(replay)
    assert (answer.code, answer.status) == ("SignatureDoesNotMatch", 403), answer
    scene.assert_unchanged()


# --- keys created and deleted by another process -------------------------------------------------


def accepted(url: str, creds: Credentials) -> bool:
    answer = send(signed(url, "json", "ListQueues", {"QueueNamePrefix": "tamper-none-"}, creds))
    assert answer.status == 200 or answer.code == "InvalidClientTokenId", answer
    return answer.status == 200


def test_key_created_by_another_process_works_within_a_second(server: sqsserver.SqsServer) -> None:
    assert not accepted(server.url, Credentials("CQ" + "0" * 18, "x"))  # the server has just read its copy of the keys
    key = make_key()
    try:
        t0 = time.monotonic()
        while not accepted(server.url, key):
            assert time.monotonic() - t0 < MISS_REFRESH_S + 2.0, "a new key was not usable within ~1 s"
        print(f"new key usable after {time.monotonic() - t0:.2f} s")
    finally:
        drop_key(key)


def test_deleted_key_stops_working_within_the_refresh_time(scene: Scene) -> None:
    key = make_key()
    t0 = time.monotonic()
    while not accepted(scene.url, key):  # a new key is usable once the server's copy is refreshed (<= ~1 s)
        assert time.monotonic() - t0 < MISS_REFRESH_S + 2.0, "a new key was not usable within ~1 s"
    drop_key(key)
    t0 = time.monotonic()
    while accepted(scene.url, key):
        assert time.monotonic() - t0 < REFRESH_S + 2.0, f"a deleted key still worked after {REFRESH_S} s"
    print(f"deleted key refused after {time.monotonic() - t0:.2f} s")
    answer = send(send_a(scene, "query", key))
    assert (answer.code, answer.status) == ("InvalidClientTokenId", 403), answer
    scene.assert_unchanged()


def test_key_id_of_another_shape_stored_in_the_table_is_accepted(server: sqsserver.SqsServer, engine: Engine) -> None:
    """Ids that are not "CQ" + 18 don't make the server re-read the table at once, but one stored
    there (say, imported from elsewhere) is found by the slow refresh and works."""
    key = Credentials(f"IMPORTED-{uuid.uuid4().hex[:12]}", secrets.token_urlsafe(30))
    table = f"{TEST_KEYSPACE}.access_keys"
    insert = f"INSERT INTO {table} (access_key_id, secret, description, created_at) VALUES (%s, %s, 'tamper test', 0)"
    engine.run(engine.cq.db.run(insert, [key.access_key, key.secret_key]))
    try:
        t0 = time.monotonic()
        while not accepted(server.url, key):
            assert time.monotonic() - t0 < REFRESH_S + 2.0, "a stored key of another shape was never accepted"
    finally:
        drop_key(key)


# --- the cost of a flood of made-up key ids ------------------------------------------------------


def test_flood_of_made_up_key_ids_costs_at_most_a_read_per_second(keys: tuple[Credentials, Credentials]) -> None:
    """2,000 requests, each with a new made-up key id of casque's shape: each is refused with
    InvalidClientTokenId, and the server reads access_keys at most about once a second (counted by
    tests/support/counted_serve.py around the database calls, not by the code under test)."""
    counts = Path(tempfile.mkdtemp()) / "reads.json"
    srv = sqsserver.start(TEST_KEYSPACE, "--auth", "sigv4", launcher=("-m", "tests.support.counted_serve", str(counts)))
    try:
        template = signed(srv.url, "query", "ListQueues", {}, keys[0])
        reads_before = count_file.read(counts, "access_key_reads", time.time())
        codes: list[str] = []
        t0 = time.monotonic()
        threads = [threading.Thread(target=flood, args=(template, keys[0].access_key, 250, codes)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.monotonic() - t0
        reads = count_file.read(counts, "access_key_reads", time.time()) - reads_before
    finally:
        srv.stop()
    print(f"2,000 made-up key ids in {seconds:.1f} s: {reads} reads of access_keys")
    assert codes == ["InvalidClientTokenId"] * 2000
    assert reads <= seconds / MISS_REFRESH_S + 2, f"{reads} reads in {seconds:.1f} s"


def flood(template: Wire, real_id: str, n: int, codes: list[str]) -> None:
    for _ in range(n):
        made_up = "CQ" + "".join(secrets.choice(string.ascii_uppercase + string.digits) for _ in range(18))
        codes.append(
            send(template.with_header("Authorization", template.header("Authorization").replace(real_id, made_up))).code
        )


# --- what real SDKs sign is what casque requires -------------------------------------------------


def test_javascript_sdk_v3_signs_what_casque_requires(
    server: sqsserver.SqsServer, keys: tuple[Credentials, Credentials]
) -> None:
    """The JS SDK v3 (its own SigV4 signer, JSON protocol) works against --auth sigv4 unchanged:
    host, X-Amz-Target and the body's hash are all signed; a wrong secret is refused."""
    node = shutil.which("node")
    assert node, "node is needed for the JS SDK test: apt-get install nodejs npm"
    js = Path(__file__).parent / "js"
    if not (js / "node_modules" / "@aws-sdk" / "client-sqs").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=js, check=True, capture_output=True, timeout=600)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": keys[0].access_key, "AWS_SECRET_ACCESS_KEY": keys[0].secret_key}
    out = subprocess.run(
        [node, "sigv4_check.mjs", server.url, f"tamper-js-{uuid.uuid4().hex[:8]}"],
        cwd=js,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 0 and result == {"body": "signed by js", "wrong_secret": "SignatureDoesNotMatch"}, (
        result,
        out.stderr[-500:],
    )
