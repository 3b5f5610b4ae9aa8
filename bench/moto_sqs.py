"""Part "moto-sqs": moto's SQS test-suite pointed at a real ``casque serve`` (``python -m bench --only moto-sqs``).

moto (the Python AWS mock) runs its tests in "server mode" when ``TEST_SERVER_MODE=true``: its
``mock_aws`` decorator then mocks nothing and patches ``boto3.client``/``boto3.resource`` to send
every request to ``TEST_SERVER_MODE_ENDPOINT`` (normally moto's own server on localhost:5000). This
part points that endpoint at a ``casque serve`` it starts on a free loopback port (keyspace
``casque_moto``, emptied of queues first, ``sqs.auth = "none"``), so moto's ~180 SQS tests become a third-party
conformance check (12 of them marked as verified against AWS: their failures are flagged so).

* moto's tests: by default the source distribution of moto ``MOTO_VERSION`` from PyPI (it ships ``tests/``),
  unpacked in bench/out/moto/, run by a venv of its own there with ``moto[server]``, ``pytest`` and ``freezegun``
  (they do not belong in casque's venv); both made on first use. ``--moto-checkout PATH`` runs a moto source tree
  instead (``git clone https://github.com/getmoto/moto``), ``--moto-python PY`` another interpreter. Nothing of
  moto is copied into this project.
* ``MOTO_CALL_RESET_API=false``: moto's per-test ``POST /moto-api/reset`` is a moto-only endpoint,
  so state is not wiped between tests (casque has none of it; tests that assume an empty account
  fail, and are classified so). ``TESTS_SKIP_REQUIRES_DOCKER=true``: the Lambda tests need Docker and
  moto's Lambda, not SQS (moto skips them itself). tests/test_sqs/test_server.py is left out: it
  drives moto's own app in-process and never reaches the endpoint, so its result says nothing of casque.

Writes ``bench/out/moto_sqs.json`` (every test's outcome and first error line) and
``bench/out/moto_sqs.md`` (counts, then the failures grouped by cause: the ``CAUSES`` rules below,
first match wins); the run's results keep the counts and the groups. The grouping is a first cut for a human:
docs/sqs-moto.md is the reviewed one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

from .env import ROOT, bench_settings, out_dir
from .many_queues import free_port

# (cause, class, regex over "test id + first error line"), first match wins. Class: a = casque differs from SQS,
# c = moto-specific, or casque answers as AWS was recorded answering. Test names appear where the first error line
# alone does not tell the cause (read from moto's test code; docs/sqs-moto.md says why each is where it is).
CAUSES: list[tuple[str, str, str]] = [
    (
        "other AWS services (STS GetCallerIdentity in moto's account_id fixture, CloudFormation, AssumeRole) sent to "
        "the SQS endpoint",
        "c",
        r"GetCallerIdentity|CreateStack|AssumeRole|test_sqs_cloudformation|test_sqs_integration",
    ),
    (
        "moto's server address (localhost:5000) or account id (123456789012) expected in URLs/ARNs",
        "c",
        r"localhost:5000|123456789012|arn:aws:sqs:\.\.\.000000|test_receive_message_using_name_should_return_name_as_url",
    ),
    (
        "moto accepts what SQS refuses (MessageRetentionPeriod 1; MessageDeduplicationId on a standard queue): casque "
        "refuses as SQS does",
        "c",
        r"test_message_retention_period|test_message_delay_is_more_than_15_minutes",
    ),
    (
        "moto expects of FIFO queues what AWS does not answer (FifoQueue on a standard queue: AWS's 'Unknown Attribute "
        "FifoQueue.'; a batch entry without MessageGroupId: AWS's InvalidParameterValue for the request)",
        "c",
        r"test_create_queue_with_different_attributes_fail|test_create_fifo_queue_with_dlq"
        r"|test_send_messages_to_fifo_without_message_group_id",
    ),
    (
        "moto refuses what AWS accepts or words it otherwise than AWS was recorded (a non-ASCII attribute name; the "
        "attribute type's text; AddPermission's Version 2008-10-17)",
        "c",
        r"test_message_with_invalid_attributes|test_message_with_attributes_invalid_datatype|::test_permissions ",
    ),
    (
        "moto's receipt-handle error text (casque answers AWS's: 'The input receipt handle \"...\" is not a valid "
        "receipt handle.')",
        "c",
        r"test_change_message_visibility_on_unknown_receipt_handle|test_delete_message_errors",
    ),
    (
        "a DeleteMessage with an older receipt handle of a message received again succeeds and deletes nothing",
        "a",
        r"test_delete_message_using_old_receipt_handle",
    ),
    (
        "a queue Policy statement without Resource/NotResource is refused (moto stores it)",
        "a",
        r"Resource and NotResource",
    ),
    (
        "AddPermission/RemovePermission checks and wording (owner-only actions, empty AWSAccountIds, unknown label's "
        "text)",
        "a",
        r"test_(add|remove)_permission_errors",
    ),
    (
        "an empty QueueName is MissingParameter (moto: InvalidParameterValue)",
        "a",
        r"test_create_fifo_queue_invalid_name\[\]",
    ),
    ("error message wording differs (code and status match)", "a", r"assert 'The |assert 'Id |assert 'There should"),
]


KEYSPACE = "casque_moto"


def prepare_keyspace() -> None:
    """casque_moto with the schema applied (idempotent): a keyspace of its own, so that emptying it
    before a run (``empty_queues``) touches no other bench's queues."""
    from daemon.engine.storage.schema import ensure_schema

    settings = bench_settings()
    settings.cassandra.keyspace = KEYSPACE
    ensure_schema(settings)


# SQS (and casque) refuse to recreate a name within 60 s of its deletion (QueueDeletedRecently).
RECREATE_WAIT_S = 61


def empty_queues(endpoint: str) -> int:
    """Delete every queue a previous run left (through the endpoint itself): moto's tests reuse fixed
    names such as "test-queue", so leftovers would make one run's results depend on the last. If any
    was deleted, wait out the 60 s in which its name cannot be created again, as SQS would make a
    client wait: otherwise the tests that reuse those names would fail on the cleanup, not on casque."""
    import boto3

    sqs = boto3.client(
        "sqs", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )
    deleted = 0
    while urls := sqs.list_queues(MaxResults=1000).get("QueueUrls", []):
        for url in urls:
            sqs.delete_queue(QueueUrl=url)
            deleted += 1
    if deleted:
        print(
            f"moto_sqs: waiting {RECREATE_WAIT_S} s until the {deleted} deleted names can be created again", flush=True
        )
        time.sleep(RECREATE_WAIT_S)
    return deleted


def start_serve(port: int, log: Path) -> subprocess.Popen[bytes]:
    """A real ``casque serve`` on 127.0.0.1:``port`` against casque_moto (schema applied first)."""
    prepare_keyspace()
    env = dict(os.environ, CASQUE_CASSANDRA__KEYSPACE=KEYSPACE, CASQUE_LOG__LEVEL="warning", CASQUE_LOG__FORMAT="json")
    with open(log, "wb") as err:  # the child keeps its own descriptor of the log
        proc = subprocess.Popen(
            [sys.executable, "-m", "daemon.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline().decode()
        if line.startswith("casque: listening on "):
            return proc
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit(f"casque serve did not start: see {log}")


def run_pytest(checkout: Path, python: str, endpoint: str, junit: Path, extra: list[str]) -> int:
    """moto's tests/test_sqs in server mode against ``endpoint``; the outcome is read from the junit file."""
    env = dict(
        os.environ,
        TEST_SERVER_MODE="true",
        TEST_SERVER_MODE_ENDPOINT=endpoint,
        MOTO_CALL_RESET_API="false",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        TESTS_SKIP_REQUIRES_DOCKER="true",
    )
    env.pop("PYTHONPATH", None)
    cmd = [
        python,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--color=no",
        "-o",
        "addopts=",
        f"--junitxml={junit}",
        "tests/test_sqs",
        "--ignore=tests/test_sqs/test_server.py",
        *extra,
    ]
    return subprocess.run(cmd, cwd=checkout, env=env).returncode


def outcomes(junit: Path) -> list[dict[str, Any]]:
    """One row per test case: id, outcome (passed/failed/error/skipped) and the first line of its error."""
    rows = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        tid = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, detail = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                detail = first_line(el.get("message") or el.text or "")
                break
        rows.append({"test": tid, "outcome": outcome, "detail": detail})
    return rows


def first_line(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line[:300]


def classify(row: dict[str, str]) -> tuple[str, str]:
    """(cause, class) of a failed test: the first CAUSES rule that matches, else its error's shape."""
    text = f"{row['test']} {row['detail']}"
    for cause, cls, pattern in CAUSES:
        if re.search(pattern, text):
            return cause, cls
    m = re.search(r"\(([A-Za-z.]+)\) when calling the (\w+) operation", row["detail"])
    if m:
        return f"{m.group(2)} answers {m.group(1)}", "?"
    return f"{row['detail'].split(':')[0] or 'unknown'}", "?"


def summary(rows: list[dict[str, str]], seconds: float) -> dict[str, Any]:
    counts: dict[str, int] = defaultdict(int)
    groups: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        counts[row["outcome"]] += 1
        if row["outcome"] in ("failed", "error"):
            cause, cls = classify(row)
            groups[f"({cls}) {cause}"].append(row)
    return {
        "counts": dict(counts),
        "seconds": round(seconds, 1),
        "groups": dict(sorted(groups.items(), key=lambda kv: -len(kv[1]))),
        "tests": rows,
    }


def aws_verified(checkout: Path) -> set[str]:
    """Names of moto's SQS tests marked as verified against AWS (``aws_verified`` in their decorators):
    a failure of one of those is a difference from SQS itself, not from moto's model of it."""
    found: set[str] = set()
    for path in (checkout / "tests" / "test_sqs").glob("test_*.py"):
        decorators: list[str] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("@"):
                decorators.append(line)
            elif m := re.match(r"\s*def (test_\w+)\(", line):
                if any("aws_verified" in d for d in decorators):
                    found.add(m.group(1))
                decorators = []
            elif line and not line.startswith((" ", ")", "#")):
                decorators = []
    return found


def markdown(result: dict[str, Any], commit: str) -> str:
    c = result["counts"]
    lines = [
        f"# moto tests/test_sqs against casque serve ({commit})",
        "",
        f"passed {c.get('passed', 0)}, failed {c.get('failed', 0)}, errors {c.get('error', 0)}, "
        f"skipped {c.get('skipped', 0)}; {result['seconds']} s",
        "",
    ]
    for cause, rows in result["groups"].items():
        lines += [f"## {cause}: {len(rows)}", ""]
        lines += [
            f"- `{r['test'].split('.')[-1]}`{' (verified against AWS)' if r.get('aws_verified') else ''}: {r['detail']}"
            for r in rows
        ]
        lines.append("")
    return "\n".join(lines)


MOTO_VERSION = "5.2.5"


def moto_env(checkout: Path | None, python: str | None) -> tuple[Path, str]:
    """moto's source tree and an interpreter with moto, pytest and freezegun: the ones given, else moto's sdist
    and a venv of its own in bench/out/moto/ (made once)."""
    home = out_dir("moto")
    if python is None:
        venv = home / "venv"
        py = venv / "bin" / "python"
        stamp = venv / f".moto-{MOTO_VERSION}"
        if not stamp.exists():
            print(f"moto_sqs: a venv with moto {MOTO_VERSION}, pytest and freezegun in {venv}", flush=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            pip = [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            subprocess.run([*pip, f"moto[server]=={MOTO_VERSION}", "pytest", "freezegun"], check=True)
            stamp.touch()
        python = str(py)
    if checkout is None:
        checkout = home / f"moto-{MOTO_VERSION}"
        if not (checkout / "tests" / "test_sqs").is_dir():
            print(f"moto_sqs: moto {MOTO_VERSION}'s source distribution (its tests) into {home}", flush=True)
            subprocess.run(
                [python, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
                + ["--no-binary", ":all:", f"moto=={MOTO_VERSION}", "-d", str(home)],
                check=True,
            )
            with tarfile.open(home / f"moto-{MOTO_VERSION}.tar.gz") as tar:
                safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # 3.11.4+: no paths outside
                tar.extractall(home, **safe)  # type: ignore[arg-type]
    return checkout.resolve(), python


def part(checkout: Path | None = None, python: str | None = None) -> dict[str, Any]:
    """The part: moto's tests/test_sqs against a fresh ``casque serve``; the counts and the groups of failures."""
    source, py = moto_env(checkout, python)
    out = out_dir()
    junit, log = out / "moto_sqs.junit.xml", out / "moto_sqs.serve.log"
    proc = start_serve(port := free_port(), log)
    started = time.monotonic()
    try:
        print(f"moto_sqs: deleted {empty_queues(f'http://127.0.0.1:{port}')} queues left by an earlier run", flush=True)
        run_pytest(source, py, f"http://127.0.0.1:{port}", junit, [])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    verified = aws_verified(source)
    rows = [r | {"aws_verified": r["test"].split("::")[-1].split("[")[0] in verified} for r in outcomes(junit)]
    result = summary(rows, time.monotonic() - started)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    (out / "moto_sqs.json").write_text(json.dumps(result, indent=1))
    (out / "moto_sqs.md").write_text(markdown(result, f"casque {commit}"))
    print(json.dumps(result["counts"]), {k: len(v) for k, v in result["groups"].items()})
    return {
        "moto": str(checkout) if checkout else f"moto {MOTO_VERSION} (PyPI source distribution)",
        "counts": result["counts"],
        "seconds": result["seconds"],
        "groups": {
            cause: [
                r["test"].split("::")[-1] + (" (verified against AWS)" if r.get("aws_verified") else "") for r in rs
            ]
            for cause, rs in result["groups"].items()
        },
    }
