"""The stats job's HTML report: one self-contained file (plots are inline PNGs), readable offline
and attachable to a ticket. Plots are matplotlib on the Agg backend (no display needed).

It shows the summary the JSON holds: queues by depth (stacked by state), each of the deepest
queues' shards (skew is a tall bar) and buckets, and, when history is recorded, per-task
throughput over time, latency percentiles and failure rates.
"""

from __future__ import annotations

import base64
import html
import io
from datetime import UTC, datetime
from typing import Any

from matplotlib.ticker import MaxNLocator

TOP_QUEUES = 20
DETAIL_QUEUES = 6
TOP_TASKS = 8
STATES = (("waiting_due", "#3b7dd8"), ("scheduled", "#9bbbe8"), ("in_flight", "#f0a030"), ("poisoned", "#d04040"))


def render(summary: dict[str, Any], hours: list[dict[str, Any]]) -> str:
    """The whole report as one HTML string."""
    queues = summary["queues"]
    deepest = sorted(queues, key=lambda q: -(queues[q]["total"] + queues[q]["poisoned"]))
    parts = [
        f"<h1>casque stats</h1><p>keyspace <b>{_e(summary['keyspace'])}</b>, at {_e(summary['now'])}, "
        f"{len(queues)} queue(s); history window from {_e(summary['history']['since'])}</p>"
    ]
    parts.append(_queue_table(queues, deepest))
    if queues:
        parts.append(_img(_queues_plot(queues, deepest[:TOP_QUEUES])))
        parts.append("<h2>Shards and buckets of the deepest queues</h2>")
        parts.append(_img(_detail_plot(queues, deepest[:DETAIL_QUEUES])))
    parts.append(_tasks_section(summary["history"], hours))
    style = (
        "body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
        "th{background:#eee}td:first-child{text-align:left}"
    )
    head = f"<head><meta charset='utf-8'><title>casque stats</title><style>{style}</style></head>"
    return f"<!doctype html><html>{head}<body>{''.join(parts)}</body></html>"


def _queue_table(queues: dict[str, Any], order: list[str]) -> str:
    cols = ("waiting_due", "scheduled", "in_flight", "poisoned", "oldest_due_age_s", "skew", "shards")
    head = "".join(f"<th>{c}</th>" for c in ("queue",) + cols)
    body = "".join(
        "<tr>" + f"<td>{_e(q)}</td>" + "".join(f"<td>{_fmt(queues[q][c])}</td>" for c in cols) + "</tr>" for q in order
    )
    return f"<h2>Queues</h2><table><tr>{head}</tr>{body}</table>"


def _tasks_section(history: dict[str, Any], hours: list[dict[str, Any]]) -> str:
    if not history["available"]:
        return f"<h2>Tasks</h2><p>No task statistics: {_e(history['note'])}</p>"
    tasks = history["tasks"]
    if not tasks:
        return "<h2>Tasks</h2><p>No history rows in the window (only queues created with --history record them).</p>"
    cols = (
        "done",
        "failed",
        "poisoned",
        "timed_out",
        "done_per_s",
        "failure_rate",
        "duration_ms_p50",
        "duration_ms_p90",
        "duration_ms_p99",
        "lateness_ms_p50",
        "lateness_ms_p99",
    )
    head = "".join(f"<th>{c}</th>" for c in ("queue", "task") + cols)
    body = "".join(
        "<tr>"
        + f"<td>{_e(t['queue'])}</td><td>{_e(t['task'])}</td>"
        + "".join(f"<td>{_fmt(t[c])}</td>" for c in cols)
        + "</tr>"
        for t in tasks
    )
    since, now = _time(history["since"]), _time(history["until"])
    return (
        f"<h2>Tasks</h2><table><tr>{head}</tr>{body}</table>"
        + _img(_tasks_plot(tasks[:TOP_TASKS]))
        + (_img(_hours_plot(hours, tasks[:TOP_TASKS], since, now)) if hours else "")
    )


def _queues_plot(queues: dict[str, Any], names: list[str]) -> Any:
    fig, axes = _figure(10, 0.5 + 0.3 * len(names))
    ax = axes[0][0]
    left = [0] * len(names)
    for state, color in STATES:
        values = [queues[q][state] for q in names]
        ax.barh(names, values, left=left, color=color, label=state)
        left = [a + b for a, b in zip(left, values)]
    ax.invert_yaxis()
    ax.set_xlabel("messages")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title("Depth by state")
    return fig


def _detail_plot(queues: dict[str, Any], names: list[str]) -> Any:
    fig, axes = _figure(12, 2.6 * len(names), rows=len(names), cols=2)
    for i, q in enumerate(names):
        shard_ax, bucket_ax = axes[i]
        per_shard = queues[q]["per_shard"]
        shard_ax.bar(range(len(per_shard)), per_shard, color="#3b7dd8")
        shard_ax.set_title(f"{q}: messages per shard (skew {_fmt(queues[q]['skew'])})", fontsize=9)
        shard_ax.set_xlabel("shard", fontsize=8)
        buckets = queues[q]["per_bucket"]
        bottom = [0] * len(buckets)
        for state, color in STATES[:3]:
            values = [b[state] for b in buckets.values()]
            bucket_ax.bar([int(k) for k in buckets], values, bottom=bottom, color=color, label=state)
            bottom = [a + b for a, b in zip(bottom, values)]
        bucket_ax.set_title(f"{q}: messages per time bucket", fontsize=9)
        bucket_ax.set_xlabel("bucket", fontsize=8)
        bucket_ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        for ax in (shard_ax, bucket_ax):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig


def _tasks_plot(tasks: list[dict[str, Any]]) -> Any:
    fig, axes = _figure(14, 0.8 + 0.35 * len(tasks), cols=3)
    thr, lat, fail = axes[0]
    names = [f"{t['queue']}/{t['task']}" for t in tasks]
    thr.barh(names, [t["done_per_s"] or 0 for t in tasks], color="#3b7dd8")
    thr.set_title("done per second")
    for offset, p, color in ((-0.25, 50, "#9bbbe8"), (0, 90, "#3b7dd8"), (0.25, 99, "#1b4d98")):
        lat.barh(
            [i + offset for i in range(len(tasks))],
            [t[f"duration_ms_p{p}"] or 0 for t in tasks],
            height=0.25,
            color=color,
            label=f"p{p}",
        )
    lat.set_yticks(range(len(tasks)), [""] * len(tasks))
    lat.set_title("attempt duration (ms)")
    lat.legend(loc="lower right")
    fail.barh(names, [t["failure_rate"] or 0 for t in tasks], color="#d04040")
    fail.set_xlim(0, 1)
    fail.set_yticks(range(len(tasks)), [""] * len(tasks))
    fail.set_title("failure rate")
    for ax in (thr, lat, fail):
        ax.invert_yaxis()
    return fig


def _hours_plot(hours: list[dict[str, Any]], tasks: list[dict[str, Any]], since: datetime, now: datetime) -> Any:
    fig, axes = _figure(12, 3.5)
    ax = axes[0][0]
    for t in tasks:
        points = sorted((h["hour"], h["done"]) for h in hours if h["queue"] == t["queue"] and h["task"] == t["task"])
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"{t['queue']}/{t['task']}")
    ax.set_xlim(since.replace(tzinfo=None), now.replace(tzinfo=None))
    ax.set_ylim(bottom=0)
    ax.set_title("done per hour (UTC)")
    ax.legend(fontsize=8)
    fig.autofmt_xdate()
    return fig


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def _figure(width: float, height: float, rows: int = 1, cols: int = 1) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, cols, figsize=(width, max(height, 2.0)), squeeze=False)
    return fig, axes


def _img(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return f"<p><img alt='plot' src='data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}'></p>"


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else _e(str(value))


def _e(text: Any) -> str:
    return html.escape(str(text))
