"""A real ``casque serve`` process for the SQS tests: started on 127.0.0.1 port 0 against the
test keyspace, its URL read from the line it prints once bound, stopped with SIGTERM."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class SqsServer:
    url: str
    proc: subprocess.Popen[str]

    def stop(self) -> str:
        """SIGTERM, wait, and return what it wrote to stderr (for assertions on its log)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.stderr.read() if self.proc.stderr else ""


def start(
    keyspace: str,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
    launcher: tuple[str, ...] = ("-m", "daemon.cli"),
) -> SqsServer:
    """``launcher``: what runs ``serve ...`` (a wrapper such as tests/support/counted_serve.py)."""
    full_env = dict(os.environ, CASQUE_CASSANDRA__KEYSPACE=keyspace, CASQUE_LOG__FORMAT="json", **(env or {}))
    proc = subprocess.Popen(
        [sys.executable, *launcher, "serve", "--port", "0", *args],
        cwd=ROOT,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            if line.startswith("casque: listening on "):
                return SqsServer(line.split()[-1], proc)
            if not line and proc.poll() is not None:
                break
    proc.kill()
    raise AssertionError(f"casque serve did not start: {proc.stderr.read() if proc.stderr else ''}")
