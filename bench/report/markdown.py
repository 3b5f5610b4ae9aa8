"""The shared writer of docs/benchmarks.md: the engine run's markers, number and latency formatting,
markdown tables, and the writer of a section that its own run rewrites between its markers."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

from ..env import DOCS, out_dir
from ..stats import fmt_ms

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def _n(x: float | None, digits: int = 0) -> str:
    if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))):
        return "–"
    return f"{x:,.{digits}f}"


def _lat(lat: dict[str, Any]) -> str:
    return " | ".join(fmt_ms(lat[k]) for k in ("p50", "p95", "p99", "max"))


def _ms(x: float | None) -> str:
    """A latency with its unit: '183 ms' or '2.07 s'."""
    text = fmt_ms(x)
    return text if text.endswith(" s") or text == "–" else text + " ms"


def _met(ok: bool | None) -> str:
    return "–" if ok is None else ("**met**" if ok else "**missed**")


def _table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _write_section(
    body: str, out_name: str, plot: Path | None, begin: str, end: str, to_docs: bool, before: str | None = None
) -> Path:
    """A section that its own run rewrites between its markers in docs/benchmarks.md, leaving the
    rest of the file alone (placed before the ``before`` marker, or at the end, the first time); or
    bench/out/``out_name`` when the run is not for docs/."""
    if not to_docs:
        target = out_dir() / out_name
        target.write_text(body + "\n")
        return target
    if plot is not None:
        shutil.copy(plot, DOCS / plot.name)
    target = DOCS / "benchmarks.md"
    old = target.read_text() if target.exists() else ""
    block = f"{begin}\n{body}\n{end}"
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    elif before is not None and before in old:
        head, rest = old.split(before, 1)
        text = head + block + "\n\n" + before + rest
    else:
        text = old.rstrip("\n") + "\n\n" + block + "\n"
    target.write_text(text)
    return target
