"""The tombstones section: casque's take latency staying flat as acks pile up, beside a naive
delete-on-ack queue."""

from __future__ import annotations

from typing import Any

from .markdown import _n, _table
from .summary import tomb_ratios


def section_tomb(R: dict[str, Any], img: str) -> str:
    t = R.get("tomb")
    if not t:
        return ""
    q = t["queue"]
    rows = [
        [
            _n(p["messages"]),
            f"{p.get('elapsed_s', 0):.0f}",
            _n(p["interval_rate"]),
            _n(p["tombstones_peek_median"]),
            _n(p["tombstones_max"]),
            _n(p.get("sstables_median")),
            f"{p['peek_ms']:.2f}",
            f"{p['lock_ms']:.2f}",
            f"{p['control_ms']:.2f}",
            p["from_start"],
        ]
        for p in t["casque"]
    ]
    nrows = [
        [
            _n(p["messages"]),
            _n(p.get("interval_rate")),
            "aborted" if p.get("failed") else _n(p.get("tombstones")),
            "–" if p.get("failed") else f"{p['peek_ms']:.2f}",
        ]
        for p in t["naive"]
    ]
    return "\n".join(
        [
            "## 3. Tombstone flatness vs the anti-pattern",
            "",
            f"{_n(t['messages'])} messages through one queue ({q['shards']} shards, **one time bucket for the whole "
            "run**: every message of a "
            "shard is written to and deleted from the same partition, the worst case for casque; only the cursors keep "
            "polls off that history), "
            f"offered at a constant {_n(t['rate'])} msg/s so that every checkpoint sees the same load. Each time "
            "another checkpoint's worth is acked, "
            "the daemon's poll reads are replayed on every shard row from the cursor it persisted, with query tracing "
            "(tombstone cells the "
            "node scanned) and untraced latency (median of 15). A poll under load scans what was consumed within the "
            "last clock tolerance "
            "(rate × 5 s ÷ shards): bounded by the rate, never by the history.",
            "",
            _table(
                [
                    "acked",
                    "s",
                    "msg/s",
                    "tombstones per poll (median shard)",
                    "(worst shard, incl. lock read)",
                    "SSTables merged per peek",
                    "peek ms",
                    "lock read ms",
                    "control ms",
                    "same rows read from the row start",
                ],
                rows,
            ),
            "",
            "The naive queue (bench/naive.py: one partition, `SELECT … LIMIT 100`, delete on ack), in rounds: "
            f"{t['naive_end']}.",
            "",
            _table(["messages", "msg/s in round", "tombstones per head read", "head read ms"], nrows),
            "",
            f"casque after {_n(t['messages'])} messages: tombstones per poll ×{_n(tomb_ratios(t)[0], 2)} of the first "
            "checkpoint; peek latency "
            f"×{_n(tomb_ratios(t)[1], 2)} (median of the last three checkpoints ÷ the first three). The control column "
            "(an empty queue read at "
            "the same moment) shows how much of a probe's latency is the machine's noise of that minute; the SSTables "
            "column shows the other "
            "source of drift: how many SSTables the peek had to merge (read amplification, which compaction moves up "
            "and down), while the "
            "tombstones it scans stay flat.",
            "",
            f"![tombstone flatness]({img}/bench-tombstones.png)",
            "",
        ]
    )
