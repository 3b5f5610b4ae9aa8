"""The node a run measured on: fresh or with history, its heap, and what it did during each part.

At the run's start (``describe``): the JVM's flags (``-Xmx``, the collector), its uptime (from /proc), the
keyspaces and tables it holds (``nodetool tablestats``, the Cassandra tarball's nodetool as ``casque cassandra
nodetool`` runs it), its data on disk, and a verdict: *fresh* when it holds no keyspace but Cassandra's own and the
bench's, else *with history*. Around each part (``sample`` before, ``delta`` after): the node's own local read and
write latency over the part (the change of each keyspace's total latency ÷ the change of its count, from
``tablestats``: a mean, not a percentile), and its GC pauses in that window, read from its gc.log. Every figure is
best effort: a node this module cannot find (not the devnode launcher's) gives ``{}`` and the report says "not
known".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from .env import node_pid

#: Cassandra's own keyspaces, and the ones a bench run makes: anything else means the node has a history
SYSTEM = ("system", "system_auth", "system_distributed", "system_schema", "system_traces", "system_views")
BENCH_PREFIX = "casque_bench"
_GC = re.compile(r"^\[([^\]]+)\]\[[^\]]*\]\[[^\]]*\] GC\(\d+\) Pause .*?([\d.]+)ms\s*$")


def jvm(pid: int) -> dict[str, Any]:
    """The node's heap and collector from its command line, its log and data folders, its uptime."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        start_ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot_uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return {}

    def flag(prefix: str) -> str | None:
        return next((a[len(prefix) :] for a in argv if a.startswith(prefix)), None)

    gc = next((a[len("-XX:+Use") :] for a in argv if a.startswith("-XX:+Use") and a.endswith("GC")), None)
    return {
        "pid": pid,
        "heap_max": flag("-Xmx"),
        "heap_min": flag("-Xms"),
        "gc": gc,
        "log_dir": flag("-Dcassandra.logdir="),
        "data_dir": flag("-Dcassandra.storagedir="),
        "uptime_s": round(boot_uptime - start_ticks / os.sysconf("SC_CLK_TCK")),
    }


def nodetool(*args: str, timeout: float = 60) -> str | None:
    """``nodetool ARGS`` against the devnode (bin/nodetool's class with the node's JMX port), or None."""
    try:
        from daemon.devnode import ClusterSpec, ensure_cassandra, find_java, load_saved_spec
        from daemon.devnode.jvm import nodetool_command

        spec = load_saved_spec() or ClusterSpec()
        cmd = nodetool_command(find_java(), ensure_cassandra(spec.version), spec.node(1).jmx_port, list(args))
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except Exception:
        return None
    return done.stdout if done.returncode == 0 else None


def keyspace_stats() -> dict[str, dict[str, float]] | None:
    """Per keyspace: its tables, and its local reads and writes so far (count, total latency in ms)."""
    text = nodetool("tablestats", "-F", "json")
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    out: dict[str, dict[str, float]] = {}
    for ks, v in data.items():
        if not isinstance(v, dict):
            continue
        row = {"tables": float(len(v.get("tables") or {}))}
        for op in ("read", "write"):
            count = float(v.get(f"{op}_count") or 0)
            mean = v.get(f"{op}_latency_ms")
            row[f"{op}_count"] = count
            row[f"{op}_total_ms"] = count * float(mean) if isinstance(mean, (int, float)) else 0.0
        out[ks] = row
    return out


def _du(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += (Path(root) / f).stat().st_size
            except OSError:
                pass
    return total


def describe() -> dict[str, Any]:
    """What the node was at the run's start (see the module's docstring)."""
    pid = node_pid()
    if pid is None:
        return {}
    out = jvm(pid)
    ks = keyspace_stats()
    if ks is not None:
        others = {k: int(v["tables"]) for k, v in ks.items() if k not in SYSTEM and not k.startswith(BENCH_PREFIX)}
        out.update(
            keyspaces=len(ks),
            tables=int(sum(v["tables"] for v in ks.values())),
            other_keyspaces=others,
            fresh=not others,
        )
    if out.get("data_dir"):
        out["data_bytes"] = _du(Path(out["data_dir"]))
    return out


def sample() -> dict[str, Any]:
    """The node's counters now: the start of a part."""
    return {"t": time.time(), "ks": keyspace_stats()}


def gc_pauses(log_dir: str | None, since: float, until: float) -> dict[str, Any] | None:
    """The GC pauses the node's gc.log (and its rotated files) records between two instants."""
    if not log_dir:
        return None
    files = sorted(Path(log_dir).glob("gc.log*"))
    if not files:
        return None
    pauses: list[float] = []
    for f in files:
        try:
            lines = f.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            m = _GC.match(line)
            if not m:
                continue
            try:
                t = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
            except ValueError:
                continue
            if since <= t <= until:
                pauses.append(float(m.group(2)))
    return {"count": len(pauses), "total_ms": round(sum(pauses), 1), "max_ms": round(max(pauses, default=0.0), 1)}


def delta(before: dict[str, Any], log_dir: str | None) -> dict[str, Any]:
    """What the node did since ``before``: local reads and writes (count, mean ms) and GC pauses."""
    now = sample()
    out: dict[str, Any] = {"seconds": round(now["t"] - before["t"], 1)}
    a, b = before.get("ks"), now.get("ks")
    if a is not None and b is not None:
        for op in ("read", "write"):
            count = sum(v[f"{op}_count"] - a.get(k, {}).get(f"{op}_count", 0.0) for k, v in b.items())
            total = sum(v[f"{op}_total_ms"] - a.get(k, {}).get(f"{op}_total_ms", 0.0) for k, v in b.items())
            out[f"{op}s"] = int(count)
            out[f"{op}_mean_ms"] = round(total / count, 3) if count > 0 else None
    gc = gc_pauses(log_dir, before["t"], now["t"])
    if gc is not None:
        out["gc"] = gc
    return out


class Watch:
    """``with Watch(R, name):`` records the node's reads, writes and GC pauses during a part in
    ``R["meta"]["node_parts"][name]`` (a part that fails is recorded too)."""

    def __init__(self, R: dict[str, Any], name: str) -> None:
        self.R, self.name = R, name
        pid = node_pid()
        self.log_dir = jvm(pid).get("log_dir") if pid else None

    def __enter__(self) -> Watch:
        self.before = sample()
        return self

    def __exit__(self, *exc: object) -> None:
        self.R.setdefault("meta", {}).setdefault("node_parts", {})[self.name] = delta(self.before, self.log_dir)
