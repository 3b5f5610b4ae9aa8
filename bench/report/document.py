"""The engine run's whole section of docs/benchmarks.md: its parts in order, how to reproduce them,
and the writer that replaces it between the markers (or bench/out/report-<mode>.md)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ..env import DOCS, out_dir
from .engine import section_e2e, section_pickup, section_sched
from .markdown import BEGIN, END
from .peers import section_peers, section_profile, section_stress
from .summary import header, summary
from .tombstones import section_tomb


def repro() -> str:
    return "\n".join(
        [
            "## Reproduce",
            "",
            "```console",
            "make bench                          # full mode (45-60 min on this shared 2-core machine): every part, "
            "writes docs/benchmarks.md and docs/bench-*.png",
            "make bench BENCH_ARGS=--quick       # about 15 min; writes bench/out/report-quick.md",
            "python -m bench --only e2e,tomb     # some parts (e2e, takes, idle, sched, tomb, peers, stress, profile); "
            "others keep their last results",
            "python -m bench --quick --only takes,idle   # issue 15's pickup figures alone (about 2 min)",
            'python -m bench baseline --quick    # the saved quick results become issue 15\'s "before" column '
            "(bench/baseline-issue15.json)",
            "python -m bench setup               # only install: bench/requirements.lock, redis-server, postgresql, "
            "cassandra-stress",
            "python -m bench --report-only       # re-render the report from bench/out/results-full.json (after "
            "editing bench/why-issue15.toml)",
            "python -m bench --only sched --daemon-option max_poll_interval=0.1   # a what-if: its own results file, "
            "never docs/",
            "python -m bench --only peers --no-docs   # full size, one part, report in bench/out/report-full.md: docs/ "
            "keeps the full run",
            'python -m bench many-queues --quick --write-docs   # issue 17\'s scenario (section "Many queues" below); '
            "full size: without --quick",
            "python -m bench --only sqs-fifo     # issue 25: FIFO queues, casque serve beside ElasticMQ (own section "
            "below); --systems elasticmq",
            "```",
            "",
            "The parts, in the order they run:",
            "",
            "- `e2e` (1): the sweep of consumers × batch size, N no-op messages sent as fast as possible, then the "
            "best setting at half its "
            "throughput (1b).",
            "- `takes` (1c): messages offered one at a time at 20 msg/s to a default daemon; inside it "
            "bench/taketrace.py follows every take "
            "through `Database.run` and counts its requests and its sequential round trips (requests of one take in "
            "flight together count "
            "once), and names each statement; an engine that observes `casque_take_round_trips` is read too, and "
            "preferred.",
            "- `idle` (1c): a default daemon on one fresh 16-shard queue, nothing sent; after a warm-up, every request "
            "frame the daemon's "
            "driver sends (`Connection.send_msg`: statements, heartbeats, control connection) is counted over a fixed "
            "window (30 s quick, "
            "60 s full), with the engine's statements by name.",
            "- `sched` (2): delayed messages and a per-second cron on an otherwise idle daemon; lateness = handler "
            "start − due time.",
            "- `tomb` (3): tombstones and latency of casque's polls as a million messages (full mode) go through one "
            "time bucket, against "
            "a naive delete-on-ack queue.",
            "- `peers` (4): casque, Celery, arq, Dramatiq, pgqueuer and procrastinate, interleaved, throughput at full "
            "load, then every "
            "system at an equal rate (half the slowest one's maximum) for latency; the CDF plot draws every system.",
            "- `stress` (5): cassandra-stress on the same node, the physical ceiling.",
            "- `profile` (6): py-spy on the daemon at full load.",
            "- `sqs-fifo`: FIFO queues over the SQS API, `casque serve` beside ElasticMQ (bench/sqs_fifo.py; section "
            '"FIFO queues beside '
            'ElasticMQ" below, between markers of its own).',
            "",
            'The Summary compares every issue-15 target with bench/baseline-issue15.json (the "before" column, written '
            "by "
            "`python -m bench baseline`) and states the reason of each miss from bench/why-issue15.toml (written by "
            "hand after the run; a "
            "placeholder sentence until then).",
            "",
            "The bench installs what it needs itself: its hash-locked Python packages (bench/requirements.lock) into "
            "the running venv, "
            "Debian's redis-server and postgresql (as root, `apt-get update` first), cassandra-stress from Maven "
            "Central, and it starts the "
            "local Cassandra node (`daemon.devnode`) and its own Redis and PostgreSQL instances on ports 6391 and "
            "5439, which it stops at "
            "the end. Everything it writes in Cassandra is in the `casque_bench` keyspace and expires by TTL.",
            "",
        ]
    )


def render(R: dict[str, Any], img: str) -> str:
    parts = [
        "# casque benchmarks",
        "",
        BEGIN,
        "",
        header(R),
        "",
        "## Summary: the targets",
        "",
        summary(R),
        "",
        section_e2e(R, img),
        section_pickup(R),
        section_sched(R),
        section_tomb(R, img),
        section_peers(R, img),
        section_stress(R),
        section_profile(R, img),
        repro(),
        END,
    ]
    return "\n".join(p for p in parts if p is not None)


def write(R: dict[str, Any], plots_dir: Path, to_docs: bool, name: str = "report-quick.md") -> Path:
    if to_docs:
        target = DOCS / "benchmarks.md"
        for png in plots_dir.glob("bench-*.png"):
            shutil.copy(png, DOCS / png.name)
    else:
        target = out_dir() / name
    text = render(R, ".")  # the PNGs sit beside the report in both cases
    if target.exists():
        old = target.read_text()
        if BEGIN in old and END in old:
            head, rest = old.split(BEGIN, 1)
            _, tail = rest.split(END, 1)
            body = text.split(BEGIN, 1)[1].split(END, 1)[0]
            text = head + BEGIN + body + END + tail  # what a person wrote outside the markers stays
    target.write_text(text if text.endswith("\n") else text + "\n")
    return target
