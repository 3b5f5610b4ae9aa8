"""docs/benchmarks.md: the tables and plots of one run, regenerated between two markers.

The header says where and on what node the run was measured (bench/node.py: fresh or with history, heap, and the
node's reads, writes and GC pauses during each part). The Summary has one row per target (bench/targets.py); with
``python -m bench --compare FILE`` an earlier run's figures stand beside them as the "before" column.

Everything between ``<!-- bench:begin -->`` and ``<!-- bench:end -->`` is written by this package
from bench/out/results-<mode>.json; text outside the markers (the reading a person wrote) is kept as it is. A quick
run writes bench/out/report-quick.md instead, so it never replaces the full run's numbers in docs/. The scenarios
with a run of their own (many-queues, sizes, sqs, sqs-fifo) rewrite only their own section, between their own
markers.

One module per part of the document: markdown (the shared writer: markers, number formatting,
tables, a section between markers), summary (the header and the Summary), engine (end-to-end, pick-up, scheduling),
tombstones, peers (peers, cassandra-stress, profile), parts (fair queues, settle, parked, soak, moto-sqs), document
(the engine run's whole section), many_queues and sqs_fifo. This package re-exports what the bench and the tests
call, so ``report.xxx`` works.
"""

from __future__ import annotations

from .document import render, repro, write
from .engine import section_e2e, section_pickup, section_sched
from .many_queues import MQ_BEGIN, MQ_END, section_many_queues, write_many_queues
from .markdown import BEGIN, END
from .peers import section_peers, section_profile, section_stress
from .sqs_fifo import (
    FIFO_BEGIN,
    FIFO_END,
    section_sqs_fifo,
    sqs_fifo_calls,
    sqs_fifo_cpu,
    sqs_fifo_table,
    write_sqs_fifo,
)
from .summary import earlier_targets, header, node_line, node_parts, summary, tomb_ratios
from .tombstones import section_tomb

__all__ = [
    "BEGIN",
    "END",
    "FIFO_BEGIN",
    "FIFO_END",
    "MQ_BEGIN",
    "MQ_END",
    "earlier_targets",
    "header",
    "node_line",
    "node_parts",
    "render",
    "repro",
    "section_e2e",
    "section_many_queues",
    "section_peers",
    "section_pickup",
    "section_profile",
    "section_sched",
    "section_sqs_fifo",
    "section_stress",
    "section_tomb",
    "sqs_fifo_calls",
    "sqs_fifo_cpu",
    "sqs_fifo_table",
    "summary",
    "tomb_ratios",
    "write",
    "write_many_queues",
    "write_sqs_fifo",
]
