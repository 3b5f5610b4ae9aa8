"""Percentiles and summaries of latency samples (milliseconds), computed the same way for every system."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already-sorted values (no interpolation: every reported value
    was really observed)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


@dataclass
class Latency:
    """p50/p95/p99/max of one set of samples, in milliseconds."""

    count: int
    p50: float
    p95: float
    p99: float
    max: float

    @classmethod
    def of(cls, samples_ms: Sequence[float]) -> Latency:
        s = sorted(samples_ms)
        return cls(len(s), percentile(s, 50), percentile(s, 95), percentile(s, 99), float(s[-1]) if s else math.nan)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Latency:
        return cls(**d)


def cdf_points(samples_ms: Sequence[float], points: int = 400) -> tuple[list[float], list[float]]:
    """A down-sampled empirical CDF (x = latency ms, y = fraction), small enough to store and plot."""
    s = sorted(samples_ms)
    if not s:
        return [], []
    n = len(s)
    idx = sorted({min(n - 1, int(i * (n - 1) / (points - 1))) for i in range(points)} | {n - 1})
    return [float(s[i]) for i in idx], [(i + 1) / n for i in idx]


def fmt_ms(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"
