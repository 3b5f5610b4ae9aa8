"""The "before" column of issue 15: figures measured on the engine before the pickup work, kept in git.

``python -m bench baseline [--quick]`` reduces the saved results of that mode (bench/out/results-<mode>.json)
to the figures the targets name (bench/targets.py) plus the take and idle breakdowns, and writes them
to bench/baseline-issue15.json with the engine's git revision, the mode and the date. The report
shows them beside every later run. A baseline is small on purpose: no samples, and one CDF (casque's at equal
load, 200 points).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .env import ROOT
from .targets import figures

PATH = ROOT / "bench" / "baseline-issue15.json"


def extract(R: dict[str, Any]) -> dict[str, Any]:
    meta = R.get("meta", {})
    parts = sorted(k for k in ("e2e", "half", "sched", "peers", "takes", "idle") if R.get(k))
    out: dict[str, Any] = {
        "engine": meta.get("versions", {}).get("casque", "?"),
        "mode": meta.get("mode", "?"),
        "date": meta.get("machine", {}).get("date", "?"),
        "load_at_start": meta.get("machine", {}).get("load_at_start", "?"),
        "reruns": [{k: r.get(k) for k in ("parts", "date", "load_at_start")} for r in meta.get("reruns", [])],
        "parts": parts,
        "figures": figures(R),
    }
    if R.get("takes"):
        t = R["takes"]
        out["takes"] = {k: t.get(k) for k in ("rate", "n", "levels", "engine_histogram", "latency")}
    if R.get("idle"):
        out["idle"] = {k: v for k, v in R["idle"].items()}
    cdf = (R.get("peers") or {}).get("cdf", {}).get("casque")
    if cdf:  # casque's equal-load curve, drawn as "before" beside every later run's
        xs, ys = cdf
        out["casque_equal_cdf"] = {
            "rate": R["peers"]["equal_rate"],
            "cdf": [[round(x, 2) for x in xs], [round(y, 4) for y in ys]],
        }
    return out


def save(R: dict[str, Any], path: Path | None = None) -> Path:
    path = path or PATH
    path.write_text(json.dumps(extract(R), indent=1, default=str) + "\n")
    return path


def load(path: Path | None = None) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((path or PATH).read_text())
    except (OSError, ValueError):
        return None
    return data
