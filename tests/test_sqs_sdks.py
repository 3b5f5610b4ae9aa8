"""Compiled AWS SDKs against a real ``casque serve``: the AWS SDK for Java v2 (tests/java/SqsCheck.java,
``software.amazon.awssdk:sqs`` pinned in tests/java/pom.xml) and the AWS SDK for Go v2 (tests/go, pinned
by go.mod/go.sum). Both speak the AWS JSON 1.0 protocol, the only one their current versions use for SQS
(``test_sdk_speaks_the_json_protocol`` records the headers each sends to prove it).

Each program creates a queue, sends one message with String/Binary/Number attributes and a batch of
two, long-polls them back, changes a visibility, deletes one and the rest as a batch, reads the
queue's attributes, provokes three modeled errors and deletes the queue; it prints one JSON line.
The SDKs verify the MD5s of bodies and attributes themselves, so a wrong digest fails the run.
tests/support/sdkbuild.py builds each once into ~/.cache/casque/sdk-checks (``make setup`` does it
ahead); a missing JDK, Maven or Go fails the test with the command that installs it.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import uuid
from typing import Any

import pytest

from daemon.testing import sqsserver
from tests.support import sdkbuild

# What both programs must report: 3 messages received once each, all deleted, attributes and MD5s back.
COMMON = {
    "url": True,
    "batch_ok": 2,
    "received": 3,
    "attrs_back": True,
    "md5_attrs_match": True,
    "receive_count": "1",
    "batch_deleted": 2,
    "visibility_timeout": "30",
    "left": 0,
}


def run_check(command: list[str], server: sqsserver.SqsServer, prefix: str) -> dict[str, Any]:
    """Run one SDK program against the server; its last stdout line is its JSON result."""
    out = subprocess.run(
        [*command, server.url, f"{prefix}-{uuid.uuid4().hex[:8]}"], capture_output=True, text=True, timeout=300
    )
    lines = out.stdout.strip().splitlines()
    assert lines, f"no output (exit {out.returncode}): {out.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    assert out.returncode == 0 and "fatal" not in result, result
    return result


def test_java_sdk_v2(server: sqsserver.SqsServer) -> None:
    result = run_check(sdkbuild.java_command(), server, "java")
    assert result == COMMON | {
        "err_missing_queue": "QueueDoesNotExistException",
        "err_receipt": "ReceiptHandleIsInvalidException",
        "err_batch": "TooManyEntriesInBatchRequestException",
        "err_deleted_queue": "QueueDoesNotExistException",
        "fifo_sequences_increase": True,
        "fifo_duplicate_same_sequence": True,
        "fifo_order": "a0,a1,a2|b0,b1,b2",
    }


def test_go_sdk_v2(server: sqsserver.SqsServer) -> None:
    # The Go SDK's ErrorCode() is the query-compatible code from x-amzn-query-error, as against SQS itself.
    result = run_check(sdkbuild.go_command(), server, "go")
    assert result == COMMON | {
        "err_missing_queue": "AWS.SimpleQueueService.NonExistentQueue",
        "err_receipt": "ReceiptHandleIsInvalid",
        "err_batch": "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        "err_deleted_queue": "AWS.SimpleQueueService.NonExistentQueue",
    }


def test_missing_tool_fails_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the tool on PATH the check fails (never skips) with a one-line install command."""
    monkeypatch.setenv("PATH", "/nonexistent")
    for lang, build in (("mvn", sdkbuild._build_java), ("go", sdkbuild._build_go)):
        with pytest.raises(sdkbuild.SdkToolMissing) as caught:
            build(sdkbuild.cache_root() / "sdk-checks" / "never-made")
        assert caught.value.args[0].count("\n") == 0 and f"`{lang}`" in caught.value.args[0]
    with pytest.raises(sdkbuild.SdkToolMissing, match="`java`.*apt-get install"):
        sdkbuild.java_command()


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Records each request's protocol headers and answers QueueDoesNotExist, so the SDK stops after one call."""

    seen: list[tuple[str | None, str | None]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.seen.append((self.headers.get("content-type"), self.headers.get("x-amz-target")))
        body = b'{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"recorded"}'
        self.send_response(400)
        for k, v in (
            ("content-type", "application/x-amz-json-1.0"),
            ("x-amzn-query-error", "AWS.SimpleQueueService.NonExistentQueue;Sender"),
            ("content-length", str(len(body))),
        ):
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("build", [sdkbuild.java_command, sdkbuild.go_command], ids=["java", "go"])
def test_sdk_speaks_the_json_protocol(build: Any) -> None:
    """The pinned SDK versions send AWS JSON 1.0 (what casque's JSON path serves), not the query protocol."""
    command = build()
    _Recorder.seen = []
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        out = subprocess.run(
            [*command, f"http://127.0.0.1:{httpd.server_port}", "protocol-check"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        httpd.shutdown()
    assert out.returncode == 1 and "recorded" in out.stdout  # the SDK parsed the JSON error it was given
    assert _Recorder.seen and all(
        seen == ("application/x-amz-json-1.0", "AmazonSQS.CreateQueue") for seen in _Recorder.seen
    ), _Recorder.seen
