"""A real ``casque serve`` process for the SQS tests: started on 127.0.0.1 port 0 against the
test keyspace, its URL read from the line it prints once bound, stopped with SIGTERM. With
``metrics``, it serves its /metrics too (``SqsServer.metric`` reads one series).

Its stderr (the JSON log) is read all along by a thread, not only at ``stop()``: a server that
logs more than a pipe holds (64 KiB) would otherwise block on its next log line mid-test."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from daemon.testing.daemonproc import stopped

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class SqsServer:
    proc: subprocess.Popen[str]
    metrics_url: str | None = None
    url: str = ""  # known once it listens (``listening``)
    _log: list[str] = field(default_factory=list)
    _readers: list[threading.Thread] = field(default_factory=list)
    _bound: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        for pipe, keep in ((self.proc.stderr, True), (self.proc.stdout, False)):
            if pipe is not None:
                reader = threading.Thread(target=self._drain, args=(pipe, keep), daemon=True)
                reader.start()
                self._readers.append(reader)

    def _drain(self, pipe: IO[str], keep: bool) -> None:
        for line in pipe:
            if keep:
                self._log.append(line)
            elif line.startswith("casque: listening on "):
                self.url = line.split()[-1]
                self._bound.set()

    def output(self) -> str:
        """What it has written to stderr (its JSON log) so far."""
        return "".join(self._log)

    def listening(self, timeout: float = 60.0) -> SqsServer:
        """Wait until it listens (its URL known); fails with its log if it exits or the time runs out first."""
        deadline = time.monotonic() + timeout
        while not self._bound.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                if self.proc.poll() is None:
                    self.proc.kill()
                for reader in self._readers:
                    reader.join(timeout=10)
                raise AssertionError(f"casque serve did not start (exit {self.proc.poll()}): {self.output()}")
        return self

    def metric(self, series: str) -> float:
        """One unlabelled series from the server's /metrics (0 while it has none)."""
        assert self.metrics_url is not None, "started without metrics"
        with urllib.request.urlopen(self.metrics_url, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(series + " "):
                    return float(line.split()[1])
        return 0.0

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def frozen(self) -> bool:
        return stopped(self.proc.pid)

    def stop(self) -> str:
        """SIGTERM, wait, and return what it wrote to stderr (for assertions on its log)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for reader in self._readers:
            reader.join(timeout=10)
        return "".join(self._log)


def start(
    keyspace: str,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
    launcher: tuple[str, ...] = ("-m", "daemon.cli"),
    metrics: bool = False,
) -> SqsServer:
    """``launch``, then wait until it listens."""
    return launch(keyspace, *args, env=env, launcher=launcher, metrics=metrics).listening(timeout)


def launch(
    keyspace: str,
    *args: str,
    env: dict[str, str] | None = None,
    launcher: tuple[str, ...] = ("-m", "daemon.cli"),
    metrics: bool = False,
) -> SqsServer:
    """The server process started, its log read from now on, not yet listening (a test of its startup watches it).
    ``launcher``: what runs ``serve ...`` (a wrapper such as tests/support/counted_serve.py). ``metrics``: /metrics
    on a free port of its own."""
    full_env = dict(os.environ, CASQUE_CASSANDRA__KEYSPACE=keyspace, CASQUE_LOG__FORMAT="json", **(env or {}))
    metrics_url = None
    if metrics:
        port = free_port()
        full_env |= {"CASQUE_METRICS__ENABLED": "true", "CASQUE_METRICS__PORT": str(port)}
        metrics_url = f"http://127.0.0.1:{port}/metrics"
    proc = subprocess.Popen(
        [sys.executable, *launcher, "serve", "--port", "0", *args],
        cwd=ROOT,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return SqsServer(proc, metrics_url)


def free_port() -> int:
    """A port free now on 127.0.0.1 (the server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
