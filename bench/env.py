"""Where the bench runs: its keyspace, output folder, settings, and the node it measures.

The bench never touches the ``casque`` or ``casque_test`` keyspaces: everything it writes goes to
``casque_bench`` (tables made by the engine's own ``apply_schema``), and its queues expire by TTL.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from daemon.base.config import Settings, load_settings

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
DOCS = ROOT / "docs"
KEYSPACE = "casque_bench"
QUEUE_RETENTION_S = 3600  # bench messages expire an hour after they are due: nothing piles up


def out_dir(*parts: str) -> Path:
    p = OUT.joinpath(*parts)
    p.mkdir(parents=True, exist_ok=True)
    return p


def bench_settings() -> Settings:
    """The project's settings (config file and CASQUE_* environment), pointed at casque_bench."""
    s = load_settings(env={k: v for k, v in os.environ.items() if k != "CASQUE_CASSANDRA__KEYSPACE"})
    s.cassandra.keyspace = KEYSPACE
    s.log.level = "warning"
    return s


def schema_settings() -> Settings:
    """``bench_settings()`` after applying the schema to casque_bench (idempotent)."""
    from daemon.engine.storage.schema import ensure_schema

    settings = bench_settings()
    ensure_schema(settings)
    return settings


def node_pid() -> int | None:
    """The pid of the local dev node's JVM (to read its CPU time), if it is the devnode launcher's."""
    try:
        from daemon.devnode import ClusterSpec, status

        for n in status(ClusterSpec()).nodes:
            if n.running and n.pid:
                return int(n.pid)
    except Exception:
        return None
    return None


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of processes (and their reaped children) from /proc, in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


def machine() -> dict[str, str]:
    """What the report's header says about where the numbers come from."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem_gib = f"{kb / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError):
        pass
    java = ""
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=20).stderr.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        pass
    load = ""
    try:
        load = Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        pass
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "host": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "cpu": f"{os.cpu_count()} × {cpu}",
        "memory": mem_gib,
        "python": sys.version.split()[0],
        "java": java,
        "load_at_start": load,
    }


def saved_results(path: Path, part: str) -> dict[str, Any] | None:
    """A part's saved results, for a render without a run (``--report-only``); None, with a line saying so, when
    the part has none yet."""
    if not path.exists():
        progress(f"{part}: no saved results in {path}: nothing to re-render")
        return None
    saved: dict[str, Any] = json.loads(path.read_text())
    return saved


def progress(msg: str) -> None:
    """One line of progress on stderr, with the time: long runs must show they are alive."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def versions() -> dict[str, str]:
    """What a result was measured with: casque (and its git state), the peers' packages, Python, Java."""
    from importlib.metadata import version

    import daemon

    out = {"casque": daemon.__version__}
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "daemon"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        engine = subprocess.run(
            ["git", "log", "-1", "--format=%h", "--", "daemon"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        out["casque"] += f" (git {rev}, engine as of {engine}{', with uncommitted changes' if dirty else ''})"
    except OSError:
        pass
    for pkg in (
        "cassandra-driver",
        "celery",
        "kombu",
        "redis",
        "arq",
        "dramatiq",
        "pgqueuer",
        "asyncpg",
        "procrastinate",
        "psycopg",
        "py-spy",
    ):
        try:
            out[pkg] = version(pkg)
        except Exception:
            pass
    m = machine()
    out["Python"] = m["python"]
    out["Java"] = m["java"].replace("openjdk version ", "OpenJDK ").replace('"', "")
    return out
