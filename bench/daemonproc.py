"""Run the real casque daemon (``python -m daemon.cli -c FILE run``) as a child process.

Started through the shared harness (``daemon.testing.daemonproc.spawn``, as the tests start theirs).
The bench writes the daemon a TOML config (consumers, batch size, the ``bench.probe`` handler
module) and waits for its ``worker_ready`` log line. The probe inside stops the daemon (SIGTERM,
its normal graceful path) once the expected number of acks is written, and leaves a JSON file
with what it measured.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.testing.daemonproc import spawn

from .env import KEYSPACE, ROOT, out_dir


@dataclass
class DaemonSpec:
    queue: str
    consumers: int
    batch_size: int
    expect: int = 0  # stop after this many acks (0: run until stopped)
    in_flight: int | None = None
    extra: dict[str, Any] | None = None  # more [worker] options
    env: dict[str, str] | None = None  # more environment for the probe (BENCH_PROBE_*)


#: ``python -m bench --daemon-option KEY=VALUE``: [worker] options every daemon of the run gets (what-if runs)
OVERRIDES: dict[str, Any] = {}


def config_toml(spec: DaemonSpec) -> str:
    worker = {
        "queues": [spec.queue],
        "handler_modules": ["bench.probe"],
        "consumers": spec.consumers,
        "batch_size": spec.batch_size,
    }
    if spec.in_flight is not None:
        worker["in_flight"] = spec.in_flight
    worker.update(spec.extra or {})
    worker.update(OVERRIDES)
    lines = ["[cassandra]", f'keyspace = "{KEYSPACE}"', "", "[worker]"]
    for k, v in worker.items():
        lines.append(f"{k} = {json.dumps(v)}")
    lines += ["", "[log]", 'level = "info"', 'format = "json"', ""]
    return "\n".join(lines)


class Daemon:
    """One daemon process under test."""

    def __init__(self, spec: DaemonSpec, name: str) -> None:
        self.spec = spec
        d = out_dir("runs")
        self.config = d / f"{name}.toml"
        self.log = d / f"{name}.log"
        self.result = d / f"{name}.json"
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self, timeout: float = 90.0) -> Daemon:
        self.config.write_text(config_toml(self.spec))
        for p in (self.result, self.log, Path(str(self.result) + ".progress")):
            p.unlink(missing_ok=True)
        env = dict(os.environ)
        env.update(
            {
                "BENCH_PROBE_OUT": str(self.result),
                "BENCH_PROBE_EXPECT": str(self.spec.expect),
                "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
            }
        )
        env.update(self.spec.env or {})
        env = {k: v for k, v in env.items() if not (k.startswith("CASQUE_") and k != "CASQUE_CLOCK_OFFSET_MS")}
        with open(self.log, "wb") as log:
            self.proc = spawn(self.config, env, log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the casque daemon exited with {self.proc.returncode} before it was ready: see {self.log}"
                )
            if b"worker_ready" in self.log.read_bytes():
                return self
            await asyncio.sleep(0.05)
        self.kill()
        raise RuntimeError(f"the casque daemon was not ready within {timeout:.0f}s: see {self.log}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def wait(self, timeout: float) -> dict[str, Any]:
        """Wait for the daemon to stop by itself (the probe's SIGTERM) and return what it measured."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.proc.poll() is None:
            self.stop()
        return self.read()

    def stop(self, grace: float = 40.0) -> None:
        """The graceful stop (SIGTERM, as systemd would), then SIGKILL if it hangs."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def acked(self) -> int:
        """Acks written so far (the probe refreshes this every 250 ms)."""
        try:
            return int(Path(str(self.result) + ".progress").read_text() or 0)
        except (OSError, ValueError):
            return 0

    def read(self) -> dict[str, Any]:
        if not self.result.exists():
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"the daemon left no result file ({self.result}); its log ends with:\n{tail}")
        data: dict[str, Any] = json.loads(self.result.read_text())
        data["exit_code"] = self.proc.returncode if self.proc else None
        return data


def newest_log_tail(path: Path, n: int = 20) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.exists() else ""
