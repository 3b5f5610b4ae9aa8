"""More real SQS clients against ``casque serve``: the AWS CLI (``awscli`` from PyPI, run as a
subprocess) and the AWS SDK for JavaScript v3 (``@aws-sdk/client-sqs`` from npm, run with node;
tests/js holds its package.json and lock, ``make setup`` runs ``npm ci`` there)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from daemon.testing import sqsserver
from tests.conftest import ROOT

JS = ROOT / "tests" / "js"


def aws(server: sqsserver.SqsServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        AWS_ACCESS_KEY_ID="k",
        AWS_SECRET_ACCESS_KEY="s",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE="/dev/null",
        AWS_SHARED_CREDENTIALS_FILE="/dev/null",
        AWS_MAX_ATTEMPTS="1",
    )
    exe = Path(sys.executable).parent / "aws"
    return subprocess.run(
        [str(exe), "--endpoint-url", server.url, "--output", "json", "sqs", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_aws_cli_full_cycle(server: sqsserver.SqsServer) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    created = aws(server, "create-queue", "--queue-name", name, "--attributes", "VisibilityTimeout=20")
    assert created.returncode == 0, created.stderr
    url = json.loads(created.stdout)["QueueUrl"]
    sent = aws(
        server,
        "send-message",
        "--queue-url",
        url,
        "--message-body",
        "from the cli",
        "--message-attributes",
        '{"k": {"DataType": "String", "StringValue": "v"}}',
    )
    assert sent.returncode == 0, sent.stderr
    got = aws(
        server, "receive-message", "--queue-url", url, "--wait-time-seconds", "5", "--message-attribute-names", "All"
    )
    (m,) = json.loads(got.stdout)["Messages"]
    assert m["Body"] == "from the cli" and m["MessageAttributes"]["k"]["StringValue"] == "v"
    assert m["MD5OfMessageAttributes"] == json.loads(sent.stdout)["MD5OfMessageAttributes"]
    assert aws(server, "delete-message", "--queue-url", url, "--receipt-handle", m["ReceiptHandle"]).returncode == 0
    listed = aws(server, "list-queues", "--queue-name-prefix", name)
    assert json.loads(listed.stdout)["QueueUrls"] == [url]
    attrs = aws(server, "get-queue-attributes", "--queue-url", url, "--attribute-names", "All")
    assert json.loads(attrs.stdout)["Attributes"]["VisibilityTimeout"] == "20"
    missing = aws(server, "get-queue-url", "--queue-name", name + "-nope")
    assert missing.returncode != 0 and "NonExistentQueue" in missing.stderr
    assert aws(server, "delete-queue", "--queue-url", url).returncode == 0


def test_javascript_sdk_v3(server: sqsserver.SqsServer) -> None:
    node = shutil.which("node")
    assert node, "node is needed for the JS SDK test: apt-get install nodejs npm"
    if not (JS / "node_modules" / "@aws-sdk" / "client-sqs").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=JS, check=True, capture_output=True, timeout=600)
    out = subprocess.run(
        [node, "sqs_check.mjs", server.url, f"js-{uuid.uuid4().hex[:8]}"],
        cwd=JS,
        capture_output=True,
        text=True,
        timeout=180,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 0 and "fatal" not in result, result
    assert result == result | {
        "url": True,
        "batch_ok": 2,
        "received": 3,
        "attrs_back": True,
        "md5_attrs_match": True,
        "receive_count": "1",
        "batch_deleted": 2,
        "left": 0,
        "err_missing_queue": "QueueDoesNotExist",
        "err_receipt": "ReceiptHandleIsInvalid",
        "err_batch": "TooManyEntriesInBatchRequest",
    }
