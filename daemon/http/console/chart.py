"""The one-hour chart of a queue, drawn on the server as SVG: no JavaScript charting library.

Top panel: depth (waiting, scheduled, in flight) from the daemons' depth samples (every 60 s).
Bottom panel: sent/s (estimated) and acked/s per minute. A gap means no daemon sampled that minute.
"""

from __future__ import annotations

from html import escape

from daemon.base.terminal import iso
from daemon.engine.observe.samples import Point

W, H, PAD, GAP = 760, 300, 44, 24
PANEL = (H - 2 * PAD - GAP) // 2
SERIES = (("waiting", "#2563eb"), ("scheduled", "#9333ea"), ("in_flight", "#ea580c"))
RATES = (("sent_per_s", "#16a34a", "sent/s (est.)"), ("acked_per_s", "#0f766e", "acked/s"))


def render_chart(points: list[Point], now_ms: int) -> str:
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{W}" height="{H}" fill="#fff"/>',
    ]
    top, bottom = PAD, PAD + PANEL + GAP
    depth_max = _nice(max([getattr(p, n) or 0 for p in points for n, _ in SERIES] + [1]))
    rate_max = _nice(max([getattr(p, n) or 0 for p in points for n, _, _ in RATES] + [1]))
    parts += _panel(top, depth_max, "messages")
    parts += _panel(bottom, rate_max, "per second")
    for name, colour in SERIES:
        parts += _line(points, name, colour, top, depth_max)
    for name, colour, _ in RATES:
        parts += _line(points, name, colour, bottom, rate_max)
    legend = [(n.replace("_", " "), c) for n, c in SERIES] + [(label, c) for _, c, label in RATES]
    for i, (label, colour) in enumerate(legend):
        x = PAD + i * 120
        parts.append(
            f'<rect x="{x}" y="12" width="10" height="10" fill="{colour}"/><text x="{x + 14}" '
            f'y="21">{escape(label)}</text>'
        )
    parts.append(f'<text x="{PAD}" y="{H - 8}">{escape(iso(now_ms - 3_600_000))}</text>')
    parts.append(f'<text x="{W - PAD}" y="{H - 8}" text-anchor="end">{escape(iso(now_ms))}</text>')
    if not any(p.waiting is not None for p in points):
        parts.append(
            f'<text x="{W / 2}" y="{top + PANEL / 2}" text-anchor="middle" fill="#666">no depth samples in the last '
            "hour: "
            "no daemon serves this queue</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _panel(y: int, top_value: float, unit: str) -> list[str]:
    return [
        f'<line x1="{PAD}" y1="{y + PANEL}" x2="{W - PAD}" y2="{y + PANEL}" stroke="#999"/>',
        f'<line x1="{PAD}" y1="{y}" x2="{W - PAD}" y2="{y}" stroke="#eee"/>',
        f'<text x="{PAD - 4}" y="{y + 4}" text-anchor="end">{_fmt(top_value)}</text>',
        f'<text x="{PAD - 4}" y="{y + PANEL}" text-anchor="end">0</text>',
        f'<text x="{W - PAD}" y="{y - 4}" text-anchor="end" fill="#666">{unit}</text>',
    ]


def _line(points: list[Point], name: str, colour: str, y: int, top_value: float) -> list[str]:
    """One polyline per run of points that have a value (a missing sample breaks the line)."""
    runs: list[list[str]] = [[]]
    step = (W - 2 * PAD) / max(1, len(points) - 1)
    for i, p in enumerate(points):
        value = getattr(p, name)
        if value is None:
            runs.append([])
            continue
        runs[-1].append(f"{PAD + i * step:.1f},{y + PANEL - PANEL * min(value, top_value) / top_value:.1f}")
    out = []
    for run in runs:
        if len(run) == 1:
            x, yy = run[0].split(",")
            out.append(f'<circle cx="{x}" cy="{yy}" r="2" fill="{colour}"/>')
        elif run:
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{" ".join(run)}"/>')
    return out


def _nice(value: float) -> float:
    """The next 1, 2 or 5 times a power of ten at or above value: readable axis tops."""
    magnitude = 1.0
    while magnitude * 10 <= value:
        magnitude *= 10
    while magnitude > value and magnitude > 0.1:
        magnitude /= 10
    for m in (1, 2, 5, 10):
        if m * magnitude >= value:
            return m * magnitude
    return value


def _fmt(value: float) -> str:
    return f"{value:g}"
