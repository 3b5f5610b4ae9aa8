"""The FIFO benchmark's measured run (bench/sqs_fifo.py): each scenario on a fresh queue of each server,
the servers' CPU time around it, py-spy on casque serve when asked, and the alternating order of the
servers, so that machine noise hits both alike.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiobotocore.session import get_session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from . import profiling
from .env import cpu_seconds, node_pid, out_dir, progress
from .fifo_client import Tally, drain, send_all
from .fifo_plan import SCENARIOS, SYSTEMS, Scenario, Size
from .sqs import CREDS


@dataclass(frozen=True)
class Server:
    system: str  # a key of SYSTEMS
    url: str
    pid: int  # the server process (the JVM for ElasticMQ), to read its CPU time and profile it


def cpu_now(server: Server) -> dict[str, float]:
    """CPU seconds so far of the server, the local Cassandra node (casque's store; idle but for other
    engineers' tests during an ElasticMQ run) and this bench process (the clients)."""
    node = node_pid()
    return {
        "server": cpu_seconds([server.pid]),
        "cassandra": cpu_seconds([node]) if node else 0.0,
        "client": time.process_time(),
    }


def cpu_used(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before[k], 3) for k in before}


async def measure_queue(
    c: Any, q: str, server: Server, sc: Scenario, size: Size, tally: Tally, tag: str
) -> dict[str, Any]:
    """Send, then drain, on a fresh queue: rates, ledger, the server's receive pattern and CPU time per phase."""
    await c.receive_message(QueueUrl=q, WaitTimeSeconds=0)  # the first visit of every row, as in bench/sqs.py
    c0 = cpu_now(server)
    send_s = await send_all(c, q, sc, size, tally, tag)
    c1 = cpu_now(server)
    t_drain = time.perf_counter()
    receive_s = await drain(c, q, size, tally)
    c2 = cpu_now(server)
    led = tally.ledger()
    return {
        "send_s": send_s,
        "receive_s": receive_s,
        "send_per_s": round(led.sent / send_s, 1),
        "receive_delete_per_s": round(led.received / receive_s, 1) if receive_s > 0 else 0.0,
        "ledger": led.as_dict(),
        "receives": tally.receives,
        "empty_receives": tally.empty_receives,
        "per_receive": round(len(tally.deliveries) / max(1, tally.receives - tally.empty_receives), 2),
        "call_ms": tally.latency_ms(),
        "longest_pause_s": round(tally.longest_pause_s(t_drain), 3),
        "cpu_s": {"send": cpu_used(c0, c1), "receive_delete": cpu_used(c1, c2)},
    }


async def run_one(server: Server, sc: Scenario, size: Size, round_no: int) -> dict[str, Any]:
    """One scenario on one server, on a queue of its own: the figures and the ledger, or the error."""
    out: dict[str, Any] = {"system": server.system, "scenario": sc.key, "round": round_no}
    cfg = Config(max_pool_connections=2 * (size.senders + size.receivers), retries={"max_attempts": 1}, read_timeout=60)
    tally = Tally()
    tag = uuid.uuid4().hex[:8]
    async with get_session().create_client("sqs", endpoint_url=server.url, config=cfg, **CREDS) as c:
        q = None
        try:
            q = (await c.create_queue(QueueName=f"bench-fifo-{sc.key}-{tag}.fifo", Attributes=sc.attributes()))[
                "QueueUrl"
            ]
            out.update(await measure_queue(c, q, server, sc, size, tally, tag))
        except (TimeoutError, ClientError, BotoCoreError, OSError) as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"
            out["ledger"] = tally.ledger().as_dict()  # what was sent or received before it
        finally:
            if q is not None:
                try:
                    await c.delete_queue(QueueUrl=q)
                except (ClientError, BotoCoreError, OSError):
                    pass
    return out


async def run_profiled(server: Server, sc: Scenario, size: Size, round_no: int) -> dict[str, Any]:
    """:func:`run_one` with py-spy sampling the server (bench/profiling.py); the analysed profile in ``profile``."""
    d = out_dir("sqs-fifo")
    raw = d / f"profile-{server.system}-{sc.key}.txt"
    with profiling.recording(server.pid, raw, d / f"py-spy-{server.system}-{sc.key}.log"):
        r = await run_one(server, sc, size, round_no)
    r["profile"] = profiling.analyse(raw) if raw.exists() else {"error": f"py-spy wrote no profile: see {d}"}
    return r


def _ledger_line(led: dict[str, int]) -> str:
    return f"sent {led['sent']}, lost {led['lost']}, dup {led['duplicates']}, out of order {led['out_of_order']}"


def _order(systems: list[str], step: int) -> list[str]:
    return systems if step % 2 == 0 else systems[::-1]


async def measure(servers: dict[str, Server], size: Size, profile: bool = False) -> list[dict[str, Any]]:
    """Every scenario on every server, ``size.rounds`` times, alternating which server goes first; with
    ``profile``, casque serve is sampled by py-spy in the first round (the JVM of ElasticMQ is not)."""
    runs: list[dict[str, Any]] = []
    warm = Size("warm-up", size.warmup, 1, size.senders, size.receivers, size.idle_s, size.attempt_ids)
    for (
        system,
        server,
    ) in servers.items():  # ElasticMQ's first run was 3-4x slower than its third (JIT): warm every server alike
        progress(
            f"sqs-fifo warm-up: {warm.messages} messages, {SCENARIOS[1].label}, on {SYSTEMS[system][0]} (not counted)"
        )
        await run_one(server, SCENARIOS[1], warm, 0)
    step = 0
    for round_no in range(1, size.rounds + 1):
        for sc in SCENARIOS:
            for system in _order(list(servers), step):
                progress(f"sqs-fifo round {round_no}/{size.rounds}: {sc.label} on {SYSTEMS[system][0]}")
                spy = profile and round_no == 1 and system == "casque"
                r = await (run_profiled if spy else run_one)(servers[system], sc, size, round_no)
                progress(
                    "  "
                    + (
                        f"FAILED: {r['error']}"
                        if "error" in r
                        else f"send {r['send_per_s']:,.0f} msgs/s, receive+delete {r['receive_delete_per_s']:,.0f} "
                        f"msgs/s "
                        f"({r['per_receive']} per non-empty receive, {r['empty_receives']} of {r['receives']} empty, "
                        f"longest pause {r['longest_pause_s']:.2f} s), "
                        f"ledger {_ledger_line(r['ledger'])}; server CPU {r['cpu_s']['send']['server']:.1f} s + "
                        f"{r['cpu_s']['receive_delete']['server']:.1f} s"
                    )
                )
                runs.append(r)
            step += 1
    return runs
