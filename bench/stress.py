"""Part 5: the physical limit. cassandra-stress against the same node, then casque's ceiling.

cassandra-stress (the 4.0-alpha2 tool, see bench/setup.py; it talks native protocol v4 to the
5.0 node) runs two fixed workloads in casque_bench.standard1: simple single-row writes, then a
1:1 mix of single-row reads and writes over the keys it wrote. Its op/s are what this node, on
this machine, under this run's neighbours, serves to a JVM client with many requests in flight.

The ceiling for casque comes from the CQL it was *counted* doing per message (bench/cqlcount.py,
the producer's and the daemon's, in the best end-to-end run). From the two stress numbers, a
write costs the node 1/W seconds and a read 1/R, where 1/R = 2/M − 1/W (M: mixed op/s, half of
them reads). A message costs w/W + r/R, so the ceiling is 1 / (w/W + r/R), counted two ways:

* per request (w, r = write and read round trips): a batch costs one write, as if batching were
  free: the higher, optimistic ceiling;
* per statement (w = every row written, also inside batches): batching saves nothing: the lower,
  pessimistic ceiling.

casque's throughput is reported as a percentage of both, and of a third ceiling that needs no
cost model: the node's CPU. During the write run the node burned c_w CPU-ms per op at W op/s,
so it can give W × c_w CPU-ms per second; casque's best run cost the node c_m CPU-ms per
message (both read from /proc), so the node's CPU allows W × c_w ÷ c_m messages/s.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from .env import KEYSPACE, cpu_seconds, node_pid, out_dir, progress
from .plan import Plan
from .setup import STRESS_HOME, STRESS_VERSION, stress_tool

THREADS = 96
_RATE = re.compile(r"Op rate\s*:\s*([\d,]+) op/s")
_LAT = {
    "mean": re.compile(r"Latency mean\s*:\s*([\d.]+) ms"),
    "p99": re.compile(r"Latency 99th percentile\s*:\s*([\d.]+) ms"),
}


def _run(home: Path, args: list[str], label: str) -> dict[str, Any]:
    cp = ":".join(
        [str(home / "conf"), str(home / "tools" / "lib" / "stress.jar")]
        + sorted(str(j) for j in (home / "lib").glob("*.jar"))
    )
    cmd = [
        "java",
        "-Xmx512m",
        "-cp",
        cp,
        "-Dlogback.configurationFile=logback-tools.xml",
        f"-Dcassandra.storagedir={out_dir('stress')}",
        "org.apache.cassandra.stress.Stress",
        *args,
        "-node",
        "127.0.0.1",
        "-mode",
        "native",
        "cql3",
        "protocolVersion=4",
        "-rate",
        f"threads={THREADS}",
        "-schema",
        f"keyspace={KEYSPACE}",
    ]
    npid = node_pid()
    cpu0 = cpu_seconds([npid]) if npid else 0.0
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    (out_dir("stress") / f"{label}.log").write_text(proc.stdout + proc.stderr)
    m = _RATE.search(proc.stdout)
    if proc.returncode != 0 or not m:
        raise RuntimeError(
            f"cassandra-stress {label} failed (exit {proc.returncode}): see bench/out/stress/{label}.log"
        )
    ops = int(args[1].split("=", 1)[1])
    out: dict[str, Any] = {
        "ops_per_s": float(m.group(1).replace(",", "")),
        "ops": ops,
        "wall_s": time.time() - t0,
        "command": "cassandra-stress "
        + " ".join(args)
        + f" -rate threads={THREADS} -mode native cql3 protocolVersion=4",
    }
    for k, rx in _LAT.items():
        lm = rx.search(proc.stdout)
        out[f"latency_{k}_ms"] = float(lm.group(1)) if lm else None
    if npid:
        out["node_cpu_ms_per_op"] = (cpu_seconds([npid]) - cpu0) * 1000 / ops
    return out


def run(plan: Plan) -> dict[str, Any]:
    home = stress_tool()
    n = plan.stress_ops
    progress(
        f"5. cassandra-stress {STRESS_VERSION}: {n:,} simple writes, then {n:,} mixed (1 read : 1 write), {THREADS} "
        "threads"
    )
    write = _run(home, ["write", f"n={n}", "no-warmup", "cl=ONE"], "write")
    progress(f"  simple writes: {write['ops_per_s']:,.0f} op/s (mean {write['latency_mean_ms']} ms)")
    mixed = _run(
        home,
        ["mixed", f"n={n}", "no-warmup", "cl=ONE", "ratio(write=1,read=1)", "-pop", f"dist=UNIFORM(1..{n})"],
        "mixed",
    )
    progress(f"  mixed:         {mixed['ops_per_s']:,.0f} op/s (mean {mixed['latency_mean_ms']} ms)")
    return {"version": STRESS_VERSION, "home": str(STRESS_HOME), "threads": THREADS, "write": write, "mixed": mixed}


def per_message(run: dict[str, Any]) -> dict[str, float]:
    """CQL per message from a casque RunResult dict: producer + daemon, divided by messages acked."""
    cql = run["cql"]
    n = max(1, int(cql.get("acked") or run["n"]))
    d, p = cql.get("daemon", {}), cql.get("producer", {})

    def both(key: str) -> float:
        return (float(d.get(key, 0)) + float(p.get(key, 0))) / n

    return {
        "requests": both("requests"),
        "read_requests": both("read_requests"),
        "write_requests": both("write_requests"),
        "batch_requests": both("batch_requests"),
        "reads": both("reads"),
        "writes": both("writes"),
        "lwt": both("lwt"),
        "payload_writes": both("payload_writes"),
        "bytes_written": both("bytes_written"),
        "payload_bytes": float(cql.get("payload_bytes") or 0),
    }


def ceiling(
    stress: dict[str, Any],
    best_run: dict[str, Any],
    runs: list[dict[str, Any]] | None = None,
    throughput: float | None = None,
) -> dict[str, Any]:
    """The ceilings, from the CQL counted in ``best_run`` and the CPU per message of ``runs`` (the
    median over every end-to-end run: the node is shared, and one run's CPU can carry a neighbour's
    load). ``throughput`` is casque's best (the best setting's median), compared with the ceilings."""
    pm = per_message(best_run)
    w_ops = stress["write"]["ops_per_s"]
    m_ops = stress["mixed"]["ops_per_s"]
    inv_w = 1.0 / w_ops
    inv_r = max(0.0, 2.0 / m_ops - inv_w)  # a read's cost, from the mix; never negative
    req = 1.0 / (pm["write_requests"] * inv_w + pm["read_requests"] * inv_r)
    stmt = 1.0 / (pm["writes"] * inv_w + pm["reads"] * inv_r)
    tp = throughput or best_run["throughput"]
    runs = runs or [best_run]

    def per_msg(key: str) -> float:
        return statistics.median(1000 * float(r.get("cpu", {}).get(key, 0.0)) / max(1, r["n"]) for r in runs)

    budget = {k: per_msg(k) for k in ("daemon_s", "node_s", "producer_s")}
    node_ms = budget["node_s"]
    cpu_op = stress["write"].get("node_cpu_ms_per_op") or 0.0
    cpu_ceiling = (w_ops * cpu_op / node_ms) if node_ms > 0 and cpu_op > 0 else float("nan")
    total_ms = sum(budget.values())
    cores = os.cpu_count() or 1
    return {
        "cpu_budget_ms": budget,
        "cpu_runs": len(runs),
        "cpu_bound": cores * 1000 / total_ms if total_ms else float("nan"),
        "cores": cores,
        "per_message": pm,
        "read_cost_us": inv_r * 1e6,
        "write_cost_us": inv_w * 1e6,
        "request_ceiling": req,
        "statement_ceiling": stmt,
        "cpu_ceiling": cpu_ceiling,
        "throughput": tp,
        "pct_of_request_ceiling": 100 * tp / req,
        "pct_of_statement_ceiling": 100 * tp / stmt,
        "pct_of_cpu_ceiling": 100 * tp / cpu_ceiling if cpu_ceiling == cpu_ceiling else float("nan"),
        "node_cpu_ms_per_message": node_ms,
        "node_cpu_ms_per_write_op": cpu_op,
    }
