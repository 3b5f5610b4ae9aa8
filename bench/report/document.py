"""The engine run's whole section of docs/benchmarks.md: its parts in order, how to reproduce them,
and the writer that replaces it between the markers (or bench/out/report-<mode>.md)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ..env import DOCS, out_dir
from ..plan import PARTS
from .engine import section_e2e, section_pickup, section_sched
from .markdown import BEGIN, END
from .parts import (
    section_fair,
    section_moto,
    section_parked,
    section_pipeline,
    section_settle,
    section_soak,
    section_sqs_cpu,
)
from .peers import section_peers, section_profile, section_stress
from .summary import header, summary
from .tombstones import section_tomb


def repro() -> str:
    return "\n".join(
        [
            "## Reproduce",
            "",
            "```console",
            "make bench                          # full mode: every part, writes docs/benchmarks.md and "
            "docs/bench-*.png",
            "make bench BENCH_ARGS=--quick       # the quick sizes; writes bench/out/report-quick.md",
            "python -m bench --only e2e,tomb     # some parts (" + ", ".join(PARTS) + "); others keep their last "
            "results",
            "python -m bench --compare OLD.json  # a before column: OLD.json is an earlier run's "
            "bench/out/results-<mode>.json, kept by you",
            "python -m bench setup               # only install: bench/requirements.lock, redis-server, postgresql, "
            "cassandra-stress",
            "python -m bench --report-only       # re-render the report from bench/out/results-full.json",
            "python -m bench --only sched --daemon-option max_poll_interval=0.1   # a what-if: its own results file, "
            "never docs/",
            "python -m bench --only peers --no-docs   # full size, one part, report in bench/out/report-full.md: docs/ "
            "keeps the full run",
            "python -m bench --only moto-sqs --moto-checkout ~/moto   # moto's tests from a git checkout, not PyPI's",
            "python -m bench --only sqs-fifo --systems elasticmq   # one of the two FIFO servers (docs/ only with "
            "--write-docs)",
            'python -m bench many-queues --quick --write-docs   # the many-queues scenario (section "Many queues" '
            "below); full size: without --quick",
            "```",
            "",
            "The parts, in the order they run:",
            "",
            "- `e2e` (1): the sweep of consumers × batch size, N no-op messages sent as fast as possible, then the "
            "best setting at half its throughput (1b).",
            "- `takes` (1c): messages offered one at a time at 20 msg/s to a default daemon; inside it "
            "bench/taketrace.py follows every take through `Database.run` and counts its requests and its sequential "
            "round trips (requests of one take in flight together count once), and names each statement; an engine "
            "that observes `casque_take_round_trips` is read too, and preferred.",
            "- `idle` (1c): a default daemon on one fresh 16-shard queue, nothing sent; after a warm-up, every request "
            "frame the daemon's driver sends (`Connection.send_msg`: statements, heartbeats, control connection) is "
            "counted over a fixed window (30 s quick, 60 s full), with the engine's statements by name.",
            "- `sched` (2): delayed messages and a per-second cron on an otherwise idle daemon; lateness = handler "
            "start − due time.",
            "- `tomb` (3): tombstones and latency of casque's polls as a million messages (full mode) go through one "
            "time bucket, against a naive delete-on-ack queue.",
            "- `peers` (4): casque, Celery, arq, Dramatiq, pgqueuer and procrastinate, interleaved, throughput at full "
            "load, then every system at an equal rate (half the slowest one's maximum) for latency; the CDF plot "
            "draws every system.",
            "- `stress` (5): cassandra-stress on the same node, the physical ceiling.",
            "- `profile` (6): py-spy on the daemon at full load.",
            "- `fair` (8): quiet tenants beside a noisy tenant's backlog on one queue.",
            "- `settle` (9), `parked` (10): the many-queues scenario's idle server settling, and its parked long "
            "polls.",
            "- `pipeline` (11): 20,000 rows (quick) or 100,000 (full) by `send_many` and by the Spark `load` job.",
            "- `soak` (12): the reliability tests' fault scenarios at size (full mode: also a 3-node cluster losing a "
            "node).",
            "- `moto-sqs` (13): moto's SQS test-suite against `casque serve` (moto's source distribution and a venv of "
            "its own in bench/out/moto/, made on first use).",
            "- `sqs-cpu` (14): the server's CPU time per SQS request (SendMessage, SendMessageBatch of 10 per "
            "message, an empty ReceiveMessage) from a lean client; `python -m bench.sqs_cpu --vs CHECKOUT` pairs two "
            "checkouts.",
            "- `sizes` (7b), `sqs` (7), `sqs-fifo`: sections of their own below, between markers of their own.",
            "",
            "The Summary judges every target on this run alone; with `--compare FILE` (an earlier run's results file) "
            "a before column shows that run's figures beside, computed the same way, and the targets that ask for "
            "fewer than before are judged against it.",
            "",
            "The bench installs what it needs itself: its hash-locked Python packages (bench/requirements.lock) into "
            "the running venv, Debian's redis-server and postgresql (as root, `apt-get update` first), "
            "cassandra-stress from Maven Central, and it starts the local Cassandra node (`daemon.devnode`) and its "
            "own Redis and PostgreSQL instances on ports 6391 and 5439, which it stops at the end. What it writes in "
            "Cassandra is in keyspaces of its own (`casque_bench` and others named `casque_bench_*`, `casque_moto`, "
            "the soak's `casque_soak` on its own cluster) and expires by TTL or is deleted.",
            "",
        ]
    )


def render(R: dict[str, Any], img: str, before: dict[str, Any] | None = None) -> str:
    parts = [
        "# casque benchmarks",
        "",
        BEGIN,
        "",
        header(R),
        "",
        "## Summary: the targets",
        "",
        summary(R, before),
        "",
        section_e2e(R, img),
        section_pickup(R, before),
        section_sched(R),
        section_tomb(R, img),
        section_peers(R, img),
        section_stress(R),
        section_profile(R, img),
        section_fair(R),
        section_settle(R),
        section_parked(R),
        section_pipeline(R),
        section_soak(R),
        section_moto(R),
        section_sqs_cpu(R),
        repro(),
        END,
    ]
    return "\n".join(p for p in parts if p is not None)


def write(
    R: dict[str, Any],
    plots_dir: Path,
    to_docs: bool,
    name: str = "report-quick.md",
    before: dict[str, Any] | None = None,
) -> Path:
    if to_docs:
        target = DOCS / "benchmarks.md"
        for png in plots_dir.glob("bench-*.png"):
            shutil.copy(png, DOCS / png.name)
    else:
        target = out_dir() / name
    text = render(R, ".", before)  # the PNGs sit beside the report in both cases
    if target.exists():
        old = target.read_text()
        if BEGIN in old and END in old:
            head, rest = old.split(BEGIN, 1)
            _, tail = rest.split(END, 1)
            body = text.split(BEGIN, 1)[1].split(END, 1)[0]
            text = head + BEGIN + body + END + tail  # what a person wrote outside the markers stays
    target.write_text(text if text.endswith("\n") else text + "\n")
    return target
