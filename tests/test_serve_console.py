"""``casque serve --console``: one process, one port, the SQS endpoint at / and the operators'
console at /console. Driven by a real server process, boto3 and plain HTTP with basic auth."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from base64 import b64encode
from typing import Any

from daemon.testing import sqsserver

from .conftest import ROOT, TEST_KEYSPACE
from .test_sqs import make_client


def get(url: str, user: str = "", password: str = "") -> tuple[int, str]:
    request = urllib.request.Request(url)
    if user:
        request.add_header("Authorization", "Basic " + b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_serve_with_console_answers_sqs_and_the_console_on_one_port(settings: Any, queue_name: str) -> None:
    server = sqsserver.start(TEST_KEYSPACE, "--console", env={"CASQUE_CONSOLE__ADMIN_PASSWORD": "s3cret-admin"})
    try:
        sqs = make_client(server.url)
        url = sqs.create_queue(QueueName=queue_name)["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="seen by the console")
        assert get(f"{server.url}/console/")[0] == 401  # the console asks who you are
        status, page = get(f"{server.url}/console/queues/{queue_name}", "admin", "s3cret-admin")
        assert status == 200 and "seen by the console" in page  # peeked, not consumed
        got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
        assert [m["Body"] for m in got] == ["seen by the console"]
    finally:
        server.stop()


def test_a_method_sqs_does_not_speak_is_answered_405_naming_get_and_post(queue_name: str) -> None:
    """The SQS app takes GET and POST on every path; another method gets 405 and the methods it allows, alone or
    beside the console, and the server goes on answering SQS."""
    for args in ((), ("--console",)):
        server = sqsserver.start(TEST_KEYSPACE, *args, env={"CASQUE_CONSOLE__ADMIN_PASSWORD": "s3cret-admin"})
        try:
            for method in ("PUT", "DELETE"):
                request = urllib.request.Request(f"{server.url}/000000000000/{queue_name}", method=method)
                try:
                    urllib.request.urlopen(request, timeout=30)
                    raise AssertionError(f"{method} was answered 2xx")
                except urllib.error.HTTPError as exc:
                    assert (exc.code, exc.headers["Allow"]) == (405, "GET, POST"), (args, method)
            assert "QueueUrl" in make_client(server.url).create_queue(QueueName=queue_name)
        finally:
            server.stop()


def test_serve_console_without_a_password_is_refused_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "serve", "--port", "0", "--console"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "CASQUE_CASSANDRA__KEYSPACE": TEST_KEYSPACE,
            "CASQUE_CONFIG": str(ROOT / "tests/support/empty.toml"),
        },
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "--console needs a console password" in done.stderr
