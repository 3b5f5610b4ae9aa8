"""Part 6: where the daemon's time goes at full load (py-spy, sampling the running process).

A daemon at the best setting drains ``profile_n`` messages while ``py-spy record`` samples it
(100 Hz, only the thread holding the GIL: Python CPU time, not waits; raw collapsed stacks); the bench's CQL counter is
left out of this daemon, so only the engine, the driver and the no-op handler are sampled. The stacks are reduced two
ways: self time by component (which library the sampled leaf frame is in), and inclusive time
by casque function (which part of the engine the time is spent under).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from daemon.engine.client import Casque

from .casque_run import run_casque
from .daemonproc import Daemon
from .env import out_dir, progress
from .plan import Plan

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")

COMPONENTS = [  # (name, substring of "/" + the frame's file), first match wins
    ("driver rows as namedtuples", "/collections/__init__.py"),
    ("driver rows as namedtuples", "<string>"),
    ("cassandra driver", "/cassandra/"),
    ("casque engine & daemon", "/daemon/"),
    ("bench probe (no-op handler, ack counter)", "/bench/"),
    ("structlog (logging)", "/structlog/"),
    ("asyncio / uvloop", "/asyncio/"),
    ("asyncio / uvloop", "uvloop"),
    ("json", "/json/"),
    ("prometheus_client (metrics)", "/prometheus_client/"),
    ("re (regular expressions)", "/re/"),
    ("uuid", "uuid.py"),
    ("dataclasses / copy", "dataclasses.py"),
    ("threading / queues", "threading.py"),
    ("threading / queues", "queue.py"),
    ("concurrent.futures", "/concurrent/"),
    ("uvicorn / starlette (HTTP, casque serve)", "/uvicorn/"),
    ("uvicorn / starlette (HTTP, casque serve)", "/starlette/"),
]


def py_spy() -> str:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return exe


def _component(file: str) -> str:
    path = "/" + file
    for name, needle in COMPONENTS:
        if needle in path:
            return name
    return "other Python / C" if file else "native"


def analyse(raw: Path) -> dict[str, Any]:
    total = 0
    by_component: Counter = Counter()
    self_by_func: Counter = Counter()
    incl_casque: Counter = Counter()
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        frames = [f for f in stack.split(";") if f and not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += count
        leaf = _FRAME.match(frames[-1])
        func, file = (leaf.group("func"), leaf.group("file")) if leaf else (frames[-1], "")
        by_component[_component(file)] += count
        self_by_func[f"{func} ({Path(file).name})"] += count
        seen = set()
        for f in frames:
            m = _FRAME.match(f)
            if m and "/daemon/" in "/" + m.group("file") and not m.group("file").endswith(("cli.py", "worker.py")):
                key = f"{m.group('func')} ({Path(m.group('file')).name})"
                if key not in seen:
                    seen.add(key)
                    incl_casque[key] += count
    pct = (lambda c: 100.0 * c / total) if total else (lambda c: 0.0)
    return {
        "samples": total,
        "components": [(k, pct(v)) for k, v in by_component.most_common()],
        "self": [(k, pct(v)) for k, v in self_by_func.most_common(15)],
        "casque_inclusive": [(k, pct(v)) for k, v in incl_casque.most_common(15)],
    }


async def run(cq: Casque, plan: Plan, best: dict[str, Any]) -> dict[str, Any]:
    progress(f"6. profile: py-spy on the daemon while it takes {plan.profile_n:,} messages at full load")
    d = out_dir("profile")
    raw = d / "daemon.txt"
    raw.unlink(missing_ok=True)
    spy: dict[str, subprocess.Popen[bytes]] = {}

    async def attach(daemon: Daemon) -> None:
        # The child writes through its own copy of the descriptor: ours can close once it has started.
        with open(d / "py-spy.log", "wb") as log:
            spy["p"] = subprocess.Popen(
                [
                    py_spy(),
                    "record",
                    "--pid",
                    str(daemon.pid),
                    "--rate",
                    "100",
                    "--gil",
                    "--format",
                    "raw",
                    "--output",
                    str(raw),
                    "--nonblocking",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        await asyncio.sleep(1.0)  # let it attach before the load starts

    r = await run_casque(
        cq, plan.profile_n, best["consumers"], best["batch_size"], label="profile", on_started=attach, count_cql=False
    )
    p = spy.get("p")
    if p is not None:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.terminate()
            p.wait(10)
    if not raw.exists():
        return {"error": f"py-spy wrote no profile: see {d / 'py-spy.log'}", "run": r.as_dict()}
    result = analyse(raw)
    result["run"] = r.as_dict()
    result["cpu_ms_per_message"] = 1000 * r.cpu.get("daemon_s", 0.0) / max(1, r.n)
    # GIL samples at 100 Hz over the run's wall time: the share of time the daemon's Python was busy at all
    result["gil_busy"] = result["samples"] / 100.0 / max(1e-6, r.duration_s)
    progress(f"  the daemon held the GIL {100 * result['gil_busy']:.0f}% of the run ({result['samples']:,} samples)")
    for name, share in result["components"][:6]:
        progress(f"  {share:5.1f}%  {name}")
    return result


@contextmanager
def recording(pid: int, raw: Path, log: Path, attach_timeout_s: float = 30) -> Iterator[None]:
    """py-spy sampling process ``pid`` (GIL holders, 100 Hz, raw stacks to ``raw``) for the body of the
    ``with``; it is stopped with SIGINT (py-spy writes its output then). For a server process whose load
    is driven from outside, e.g. ``casque serve`` in bench/sqs_fifo.py; read the result with :func:`analyse`."""
    raw.unlink(missing_ok=True)
    with open(log, "wb") as out:
        spy = subprocess.Popen(
            [
                py_spy(),
                "record",
                "--pid",
                str(pid),
                "--rate",
                "100",
                "--gil",
                "--format",
                "raw",
                "--output",
                str(raw),
                "--nonblocking",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    end = time.monotonic() + attach_timeout_s
    while b"Sampling process" not in log.read_bytes() and spy.poll() is None and time.monotonic() < end:
        time.sleep(0.05)  # polling py-spy's own "attached" line, not hoping
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(60)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait(10)
