"""The PNG plots the report embeds, drawn from the results (matplotlib, Agg backend, small files)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DPI = 80
COLORS = {
    "casque": "#1f77b4",
    "casque (half load)": "#17becf",
    "Celery": "#d62728",
    "arq": "#ff7f0e",
    "pgqueuer": "#2ca02c",
    "Dramatiq": "#9467bd",
    "procrastinate": "#8c564b",
    "naive": "#d62728",
}


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def throughput_vs_consumers(e2e: dict[str, Any], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4))
    grid = e2e["grid"]
    for b in sorted({r["settings"]["batch_size"] for r in grid}):
        pts = sorted((r["settings"]["consumers"], r["throughput"]) for r in grid if r["settings"]["batch_size"] == b)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"batch {b}")
    for m in e2e.get("medians", []) if e2e.get("confirm") else []:
        ax.scatter([m["consumers"]], [m["throughput"]], marker="*", s=160, color="black", zorder=5)
    best = e2e["best"]
    ax.scatter(
        [best["consumers"]],
        [best["throughput"]],
        s=220,
        facecolors="none",
        edgecolors="black",
        zorder=6,
        label=f"best: {best['consumers']} consumers, batch {best['batch_size']}",
    )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("consumers (coroutines per queue, one daemon)")
    ax.set_ylabel("messages/s, first send → last ack")
    ax.set_title(
        "casque end to end: throughput vs consumers" + (" (★ = median of re-runs)" if e2e.get("confirm") else ""),
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def latency_cdf(curves: dict[str, tuple[list[float], list[float]]], path: Path, title: str) -> Path:
    fig, ax = plt.subplots(figsize=(9.5, 4))
    for name, (xs, ys) in curves.items():
        if not xs:
            continue
        system = name.split(" @")[0]
        style: dict[str, Any] = {"color": COLORS.get(system), "linewidth": 2 if system.startswith("casque") else 1.2}
        if name.startswith("casque @ full"):
            style.update(color="#08306b", linestyle="--")
        elif name.startswith("casque (half"):
            style.update(color="#6baed6", linestyle="-.")
        elif name.startswith("casque before"):
            style.update(color="#1f77b4", linestyle=":", linewidth=1.5)
        ax.plot([max(x, 0.01) for x in xs], ys, label=name, **style)
    ax.set_xscale("log")
    ax.set_xlabel("send → handler start (ms, log scale)")
    ax.set_ylabel("fraction of messages")
    for ms in (10, 100):  # the targets: p50 ≤ 10 ms at equal load, p99 ≤ 100 ms at half load
        ax.axvline(ms, color="grey", linestyle=":", linewidth=1)
        ax.text(ms, 0.02, f" {ms} ms", color="grey", fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))  # eight curves: beside the plot, not on it
    return _save(fig, path)


def tombstones(t: dict[str, Any], path: Path) -> Path:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    cx = [p["messages"] for p in t["casque"]]
    a1.plot(
        cx,
        [max(0.5, p["tombstones_peek_median"]) for p in t["casque"]],
        marker="o",
        label="casque poll (peek, median shard)",
    )
    a1.plot(
        cx,
        [max(0.5, p["tombstones_max"]) for p in t["casque"]],
        marker=".",
        linestyle=":",
        color="#1f77b4",
        label="casque poll (peek or lock read, worst shard)",
    )
    fs = [
        (p["messages"], p["from_start_tombstones_max"])
        for p in t["casque"]
        if p.get("from_start_tombstones_max") is not None
    ]
    if fs:
        a1.plot(
            [f[0] for f in fs],
            [max(0.5, f[1]) for f in fs],
            linestyle="--",
            marker=".",
            color="grey",
            label="same casque rows, read from the row start",
        )
    nv = [p for p in t["naive"] if "tombstones" in p]
    if nv:
        a1.plot(
            [p["messages"] for p in nv],
            [max(0.5, p["tombstones"]) for p in nv],
            marker="s",
            color=COLORS["naive"],
            label="naive delete-on-ack queue",
        )
    failed = [p for p in t["naive"] if p.get("failed")]
    if failed:
        a1.scatter([failed[0]["messages"]], [1e5], marker="x", s=100, color=COLORS["naive"], zorder=5)
        a1.annotate(
            "read aborted\n(tombstone_failure_threshold)",
            (failed[0]["messages"], 1e5),
            fontsize=7,
            xytext=(5, -25),
            textcoords="offset points",
        )
    _loglog(a1, "tombstone cells scanned by one poll (trace)")
    a2.plot(cx, [p["peek_ms"] for p in t["casque"]], marker="o", label="casque peek")
    a2.plot(
        cx,
        [p["control_ms"] for p in t["casque"]],
        marker=".",
        color="grey",
        linestyle=":",
        label="empty control queue, same moment",
    )
    if nv:
        a2.plot(
            [p["messages"] for p in nv],
            [p["peek_ms"] for p in nv],
            marker="s",
            color=COLORS["naive"],
            label="naive queue head read",
        )
    _loglog(a2, "poll read latency, median (ms)")
    fig.suptitle(
        "Tombstone flatness: casque (one time bucket, worst case) vs a naive single-partition queue", fontsize=10
    )
    return _save(fig, path)


def _loglog(ax: Any, ylabel: str) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("messages consumed from the queue")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def profile_bars(p: dict[str, Any], path: Path) -> Path:
    comps = [(n.replace("(counting)", "(no-op handler, ack counter)"), v) for n, v in p["components"] if v >= 0.5][:10]
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(comps) + 1.2))
    ax.barh([n for n, _ in comps][::-1], [v for _, v in comps][::-1], color="#1f77b4")
    ax.set_xlabel("% of the daemon's GIL-holding samples (self time; compiled driver code counts under its caller)")
    ax.set_title("Where the daemon's time goes at full load (py-spy)", fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    return _save(fig, path)


def finite(x: float | None) -> bool:
    return x is not None and not (isinstance(x, float) and (math.isnan(x) or math.isinf(x)))


def rss_vs_queues(
    samples: list[dict[str, Any]], path: Path, mode: str, baseline: tuple[str, list[dict[str, Any]]] | None = None
) -> Path:
    """The serving process's RSS against the number of queues it has served since it started, one
    line per process (the kill -9 starts a new one); ``baseline`` (label, samples) adds the last
    process of another run (an engine without bounded caches) in grey."""
    fig, ax = plt.subplots(figsize=(7, 4))
    if baseline:
        label, old = baseline
        last = [s for s in old if s["incarnation"] == old[-1]["incarnation"]]
        ax.plot(
            [s["touched"] for s in last],
            [s["rss_mb"] for s in last],
            color="grey",
            linestyle="--",
            linewidth=1,
            label=label,
        )
    for inc in sorted({s["incarnation"] for s in samples}):
        mine = [s for s in samples if s["incarnation"] == inc]
        label = (
            "first process (killed with -9)"
            if inc == 1 and len({s["incarnation"] for s in samples}) > 1
            else f"process {inc}"
        )
        ax.plot(
            [s["touched"] for s in mine],
            [s["rss_mb"] for s in mine],
            marker=".",
            markersize=3,
            linewidth=1,
            label=label,
        )
    drain = [s for s in samples if s["phase"] == "drain"]
    if drain:
        ax.axvline(drain[0]["touched"], color="grey", linestyle=":", linewidth=1)
        ax.text(drain[0]["touched"], ax.get_ylim()[0], " drain sweep starts", color="grey", fontsize=8, va="bottom")
    ax.set_xlabel("queues addressed through this casque serve process so far")
    ax.set_ylabel("RSS of casque serve (MB)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"many-queues ({mode} size): server memory vs queues touched", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return _save(fig, path)


def fifo_throughput(R: dict[str, Any], path: Path) -> Path:
    """bench/sqs_fifo.py: msgs/s per scenario, send and receive+delete side by side, one bar per server
    (a failed run is an 'x' at zero, so a missing bar is never mistaken for a slow one)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    scenarios = R["scenarios"]
    systems = [s for s in ("casque", "elasticmq") if s in R["systems"]]
    colors = {"casque": COLORS["casque"], "elasticmq": "#ff7f0e"}
    width = 0.8 / max(1, len(systems))
    for ax, (key, title) in zip(
        axes,
        (("send_per_s", "send (SendMessageBatch of 10)"), ("receive_delete_per_s", "receive + DeleteMessageBatch")),
    ):
        for i, system in enumerate(systems):
            xs = [j + (i - (len(systems) - 1) / 2) * width for j in range(len(scenarios))]
            vals = [(R["summary"].get(sc["key"], {}).get(system) or {}).get(key) for sc in scenarios]
            ax.bar(
                [x for x, v in zip(xs, vals) if v is not None],
                [v for v in vals if v is not None],
                width,
                color=colors[system],
                label=R["labels"][system],
            )
            failed = [x for x, v in zip(xs, vals) if v is None]
            if failed:
                ax.scatter(
                    failed,
                    [0] * len(failed),
                    marker="x",
                    s=80,
                    color=colors[system],
                    zorder=5,
                    label=f"{R['labels'][system]}: failed",
                )
        ax.set_xticks(range(len(scenarios)))
        ax.set_xticklabels([sc["label"].replace(", ", ",\n") for sc in scenarios], fontsize=8)
        ax.set_ylabel("messages/s")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(
        f"FIFO queues over the SQS API ({R['size']['name']} size, median of {R['size']['rounds']} round(s))",
        fontsize=10,
    )
    return _save(fig, path)


def sqs_rounds(results: dict[str, list[dict[str, Any]]], path: Path) -> Path:
    """bench/sqs.py: receive+delete msgs/s and long-poll p50 per round, one bar per server (each round a fresh
    process of each, run in the same minutes: the ratio within a round is what the box's noise leaves alone)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    names = list(results)
    colors = [COLORS["casque"], "#ff7f0e"]
    width = 0.8 / max(1, len(names))
    for ax, (part, key, title, unit) in zip(
        axes,
        (
            ("throughput", "receive_delete_per_s", "receive + DeleteMessageBatch", "messages/s"),
            ("latency", "p50_ms", "long poll: send -> receive, p50", "ms"),
        ),
    ):
        for i, name in enumerate(names):
            rounds = results[name]
            xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(rounds))]
            ax.bar(xs, [r[part][key] for r in rounds], width, color=colors[i % len(colors)], label=name)
        ax.set_xticks(range(len(results[names[0]])))
        ax.set_xticklabels([f"round {j + 1}" for j in range(len(results[names[0]]))])
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    return _save(fig, path)
