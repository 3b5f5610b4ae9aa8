"""``python -m bench owners [--quick] [--write-docs]``: per-user queues at the blog's scale, casque beside ElasticMQ.

Each owner long-polls its own queue (WaitTimeSeconds 20) in a loop, as a user's app does (the same owners, and queues,
``owner{size}-i``, in every run: a queue keeps what earlier runs left in it, as a user's does); a producer sends
``RATE`` messages a second to random owners. The owners are driven by a lean client (bench/owners_client: Go, raw
HTTP, the standard library), a process per ``PER_CLIENT`` owners, so that the clients do not bound the run; their
CPU is reported beside the servers'. For each size and server, in the same run:

- *warm*: the owners come online over ``START_S`` seconds, then poll with nothing sent for ``WARM_S``, not measured:
  each owner's first minute online (its queue row and rows read, its bookkeeping written, its queue swept once),
  which a server pays once per owner it sees. Spread over a minute, as owners come online, what each owner reads
  once a minute (its look and row, engine/queues/store.py) is spread as in the steady state, so a window of any length
  sees its share of it;
- *idle*: every owner parked, nothing sent, ``IDLE_S`` seconds: the server's CPU, the node's reads (the local reads
  and scans of the keyspace, from ``system_views``), and what each answered poll cost;
- *live*: the producer sends for ``LIVE_S`` seconds: CPU per poll answered, send -> receive p50/p99 (timed by the
  receiving client from the body), then ``DRAIN_S`` seconds for the last messages; not received (sent, not received
  by the end of the drain: still in its queue, or lost), duplicated, errors (failed or refused calls).

casque serves with one worker up to ``ONE_WORKER_MAX`` owners and with two above: a process on this box may hold
20,000 file descriptors, fewer than 20,000 open polls and the node's connections (``casque serve --workers``). Both
servers run at their defaults otherwise.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .env import KEYSPACE, ROOT, cpu_seconds, node_pid, out_dir, progress

CLIENT_SRC = ROOT / "bench" / "owners_client"
SIZES, QUICK_SIZES = (500, 2_000, 5_000, 20_000), (500, 2_000)
RATE, START_S, WARM_S, IDLE_S, LIVE_S, DRAIN_S = 20.0, 60.0, 60.0, 20.0, 30.0, 10.0
PER_CLIENT = 7_000
ONE_WORKER_MAX = 5_000
BEGIN, END = "<!-- owners:begin -->", "<!-- owners:end -->"


def client_binary() -> Path:
    """The Go client, built once per source (cached under ~/.cache/casque)."""
    digest = hashlib.sha1(b"".join(p.read_bytes() for p in sorted(CLIENT_SRC.glob("*.go")))).hexdigest()[:12]
    exe = Path.home() / ".cache" / "casque" / f"owners-client-{digest}"
    if not exe.exists():
        exe.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["go", "build", "-o", str(exe), "."], cwd=CLIENT_SRC, check=True)
    return exe


def node_reads(keyspace: str) -> int:
    """The node's local reads and scans of ``keyspace`` so far (Cassandra's own counters)."""
    from cassandra.cluster import Cluster

    cluster = Cluster(["127.0.0.1"])
    try:
        s = cluster.connect()
        return sum(
            int(r.count)
            for view in ("local_read_latency", "local_scan_latency")
            for r in s.execute(f"SELECT count FROM system_views.{view} WHERE keyspace_name = %s", [keyspace])
        )
    finally:
        cluster.shutdown()


def tree(pid: int) -> list[int]:
    """A process and its children (casque serve's workers)."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        kids = []
    return [pid, *(int(k) for k in kids)]


class Clients:
    """The owners' client processes, stepped through their phases together."""

    def __init__(self, url: str, owners: int, prefix: str, run: str = "r") -> None:
        exe = client_binary()
        n = math.ceil(owners / PER_CLIENT)
        self.procs = []
        for k in range(n):
            first, count = k * owners // n, (k + 1) * owners // n - k * owners // n
            args = [f"-url={url}", f"-prefix={prefix}", f"-run={run}", f"-owners={owners}", f"-first={first}"]
            args += [f"-count={count}"]
            args += [
                "-create",
                f"-start={START_S}",
                f"-warm={WARM_S}",
                f"-idle={IDLE_S}",
                f"-live={LIVE_S}",
                f"-drain={DRAIN_S}",
            ]
            args += [f"-rate={RATE}"] if k == 0 else []
            self.procs.append(
                subprocess.Popen([str(exe), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            )

    def phase(self, name: str) -> list[dict[str, Any]]:
        """Every client's report at the end of phase ``name`` (they wait for ``go`` after it)."""
        out = []
        for p in self.procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            if not line:
                raise SystemExit(f"bench owners: a client exited before '{name}' ({p.wait()})")
            report = json.loads(line)
            assert report["phase"] == name, report
            out.append(report)
        return out

    def go(self) -> None:
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def kinds(reports: list[dict[str, Any]]) -> dict[str, int]:
    """The clients' errors by kind (timeout, refused, reset, HTTP 5xx, ...)."""
    out: dict[str, int] = {}
    for r in reports:
        for kind, n in (r.get("error_kinds") or {}).items():
            out[kind] = out.get(kind, 0) + n
    return out


def total(reports: list[dict[str, Any]], key: str) -> float:
    return float(sum(r[key] for r in reports))


def one(system: str, url: str, server_pid: int, owners: int, keyspace: str | None) -> dict[str, Any]:
    """One size on one server: the idle and live windows (see the module's docstring)."""
    # The same owners in every run (their queues keep their history, and the keyspace does not grow run by run);
    # a message an earlier run left behind is deleted by its owner and counted apart (``stale``), not timed.
    clients = Clients(url, owners, f"owner{owners}", run=str(time.time_ns()))
    node = node_pid()

    def sample(reports: list[dict[str, Any]]) -> dict[str, float]:
        return {
            "t": time.monotonic(),
            "server": cpu_seconds(tree(server_pid)),
            "node": cpu_seconds([node]) if node else 0.0,
            "reads": float(node_reads(keyspace)) if keyspace else 0.0,
            **{k: total(reports, k) for k in ("polls", "empty", "errors", "received", "sent", "send_errors", "cpu_s")},
        }

    try:
        created = clients.phase("created")
        create_s = max(r.get("create_s", 0.0) for r in created)
        progress(f"  {system}, {owners:,} owners: queues created in {create_s:.1f} s; parking them")
        clients.go()
        clients.phase("parked")
        clients.go()
        parked = sample(clients.phase("warm"))
        clients.go()
        idle = sample(clients.phase("idle"))
        clients.go()
        live = sample(clients.phase("live"))
        clients.go()
        done = clients.phase("done")
    finally:
        clients.close()
    sent = {i for r in done for i in r["sent_ids"] or []}
    seen: dict[int, int] = {}
    latencies = []
    for r in done:
        for mid, us in r["latencies"] or []:
            seen[mid] = seen.get(mid, 0) + 1
            latencies.append(us / 1000)
    latencies.sort()

    def window(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
        s, polls = b["t"] - a["t"], b["polls"] - a["polls"]
        return {
            "seconds": s,
            "server_cpu_pct": 100 * (b["server"] - a["server"]) / s,
            "node_cpu_pct": 100 * (b["node"] - a["node"]) / s,
            "clients_cpu_pct": 100 * (b["cpu_s"] - a["cpu_s"]) / s,
            "polls_per_s": polls / s,
            "cpu_ms_per_poll": 1000 * (b["server"] - a["server"]) / polls if polls else float("nan"),
            "reads_per_s": (b["reads"] - a["reads"]) / s,
            "reads_per_poll": (b["reads"] - a["reads"]) / polls if polls else float("nan"),
            "errors": b["errors"] - a["errors"],
        }

    return {
        "system": system,
        "owners": owners,
        "create_s": create_s,
        "idle": window(parked, idle),
        "live": window(idle, live),
        "sent": len(sent),
        "send_errors": int(live["send_errors"]),
        "lost": len(sent - set(seen)),
        "duplicated": sum(n - 1 for n in seen.values()),
        "stale": int(total(done, "stale")),
        "p50_ms": statistics.median(latencies) if latencies else float("nan"),
        "p99_ms": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else float("nan"),
        "errors": int(total(done, "errors")),
        "error_kinds": kinds(done),
    }


@contextmanager
def servers(system: str, owners: int) -> Iterator[tuple[str, int, str | None]]:
    """The server for one size: its URL, its pid (its workers are its children), the keyspace the node reads."""
    from .sqs import casque_serve, elasticmq

    pids: list[int] = []
    if system.startswith("casque"):
        workers = 1 if owners <= ONE_WORKER_MAX else 2
        with casque_serve(pids, args=("--workers", str(workers))) as url:
            yield url, pids[0], KEYSPACE
    else:
        with elasticmq(pids) as url:
            yield url, pids[0], None


def run(quick: bool) -> list[dict[str, Any]]:
    results = []
    for owners in QUICK_SIZES if quick else SIZES:
        for system in ("casque", "ElasticMQ"):
            with servers(system, owners) as (url, pid, keyspace):
                r = one(system, url, pid, owners, keyspace)
            r["workers"] = (1 if owners <= ONE_WORKER_MAX else 2) if system == "casque" else 1
            progress(f"  {line(r)}")
            results.append(r)
            save(results, quick)
    return results


def line(r: dict[str, Any]) -> str:
    i, v = r["idle"], r["live"]
    return (
        f"{r['system']} {r['owners']:,} owners: idle {i['server_cpu_pct']:.0f} % CPU, {i['reads_per_s']:.1f} reads/s; "
        f"live {v['server_cpu_pct']:.0f} % CPU, {v['cpu_ms_per_poll']:.2f} ms/poll, p50 {r['p50_ms']:.1f} / p99 "
        f"{r['p99_ms']:.1f} ms, not received {r['lost']}, errors {r['errors']} {r['error_kinds'] or ''}"
    )


def save(results: list[dict[str, Any]], quick: bool) -> Path:
    path = out_dir() / f"owners-{'quick' if quick else 'full'}.json"
    path.write_text(json.dumps({"at": time.strftime("%Y-%m-%d %H:%M"), "results": results}, indent=1))
    return path


def table(results: list[dict[str, Any]]) -> str:
    head = (
        "| owners | server | polls answered/s idle | server CPU idle / live | CPU per poll (live) | node reads/s idle "
        "| reads per poll idle | send → receive p50 / p99 ms | not received / dup | errors "
        "| node / clients' CPU live |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    rows = []
    for r in results:
        i, v = r["idle"], r["live"]
        server = r["system"] + (f" ({r['workers']} workers)" if r["workers"] > 1 else "")
        reads = ("—", "—") if r["system"] != "casque" else (f"{i['reads_per_s']:.1f}", f"{i['reads_per_poll']:.2f}")
        rows.append(
            f"| {r['owners']:,} | {server} | {i['polls_per_s']:.0f} | {i['server_cpu_pct']:.0f} % / "
            f"{v['server_cpu_pct']:.0f} % | {v['cpu_ms_per_poll']:.2f} ms | {reads[0]} | {reads[1]} "
            f"| {r['p50_ms']:.1f} / {r['p99_ms']:.1f} | {r['lost']} / {r['duplicated']} | {r['errors']} "
            f"| {v['node_cpu_pct']:.0f} % / {v['clients_cpu_pct']:.0f} % |"
        )
    return head + "\n" + "\n".join(rows)


def section(results: list[dict[str, Any]], at: str) -> str:
    return "\n\n".join(
        [
            "## Owners: per-user queues long-polled (`python -m bench owners`)",
            f"Written by the run of {at}. Each owner long-polls its own queue (WaitTimeSeconds 20) from a Go client "
            f"(raw HTTP, a process per {PER_CLIENT:,} owners); a producer sends {RATE:.0f} messages a second to "
            f"random owners for {LIVE_S:.0f} s after {IDLE_S:.0f} s with every owner parked and nothing sent, which "
            f"follow the owners' coming online over {START_S:.0f} s and {WARM_S:.0f} s of polling, not measured (each "
            "owner's first minute online). CPU "
            "is % of one core over each window; reads are the node's local reads and scans of casque's keyspace. "
            "casque runs two workers where one process could not hold the polls' sockets (this box allows a "
            "process 20,000). Targets for casque at 20,000 owners: p99 <= 250 ms, all received, server CPU <= 100 %, "
            "<= 1 ms per poll, no reads for a parked owner.",
            table(results),
        ]
    )


def part(quick: bool, to_docs: bool, report_only: bool = False) -> int:
    """Measure (unless ``report_only``: the saved results), then write the section (docs/benchmarks.md between its
    markers, or bench/out/report-owners.md); 1 if a message sent to casque was not received."""
    from .report.markdown import _write_section

    path = out_dir() / f"owners-{'quick' if quick else 'full'}.json"
    if report_only:
        saved = json.loads(path.read_text())
        results, at = saved["results"], saved["at"]
    else:
        results, at = run(quick), time.strftime("%Y-%m-%d %H:%M")
    body = section(results, at)
    target = _write_section(body, "report-owners.md", None, BEGIN, END, to_docs)
    progress(f"owners: written to {target}")
    return 1 if any(r["lost"] for r in results if r["system"] == "casque") else 0
