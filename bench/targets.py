"""The targets: the figures of one run, the same figures of an earlier run, and met or missed.

``figures(R)`` reduces a run's results to the numbers the targets name; the report applies it to this run and,
with ``python -m bench --compare FILE``, to an earlier run's results file, so the two columns of the Summary are
computed the same way. A missed target states the facts the run itself shows (which peer was faster, what the take
is made of); a judgement about a miss is written by hand, outside the report's markers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

#: CPU per message, daemon + node + producer, in the full run of 2026-11-23: the target is half of it.
CPU_BEFORE_MS = 0.730


def _lat(peers: dict[str, Any], key: str) -> dict[str, float]:
    return {r["system"]: r["latency"][key] for r in peers.get("equal", [])}


def _histogram_median(h: dict[str, Any]) -> float | None:
    """The smallest bucket bound holding half the observations (Prometheus buckets are cumulative)."""
    count = h.get("count") or 0
    if not count:
        return None
    for le, cum in sorted(((float(k), v) for k, v in h["buckets"].items()), key=lambda kv: kv[0]):
        if cum >= count / 2:
            return le
    return None


def take_figures(takes: dict[str, Any]) -> dict[str, Any]:
    """Round trips per take, per traced level (``fetch_*``, ``visit_*``), and the headline
    ``take_round_trips``: the engine's own histogram when it has one, else the bench's trace of a
    fetch that took messages (the same definition)."""
    levels = takes.get("levels") or {}
    f: dict[str, Any] = {
        "low_load_p50": takes["latency"]["p50"],
        "low_load_p99": takes["latency"]["p99"],
        "low_load_rate": takes["rate"],
    }
    for level, v in levels.items():
        f.update(
            {
                f"{level}_waves_mean": v["waves"]["mean"],
                f"{level}_waves_p50": v["waves"]["p50"],
                f"{level}_waves_max": v["waves"]["max"],
                f"{level}_requests_mean": v["requests"]["mean"],
                f"{level}_take_ms_p50": v["take_ms"]["p50"],
                f"{level}_takes": v["takes"],
                f"{level}_sequence": (v.get("sequences") or [{}])[0].get("steps"),
                f"{level}_unit": v["unit"],
            }
        )
    traced = levels.get("fetch") or levels.get("visit")
    h = takes.get("engine_histogram")
    if h and h.get("count"):
        f.update(
            take_round_trips=h["mean"],
            take_round_trips_p50=_histogram_median(h),
            engine_round_trips=h["mean"],
            take_round_trips_source="engine histogram casque_take_round_trips",
        )
    elif traced:
        f.update(
            take_round_trips=traced["waves"]["mean"],
            take_round_trips_p50=traced["waves"]["p50"],
            take_round_trips_source=f"bench trace of {traced['unit']}",
        )
    if traced:
        f["take_requests_mean"] = traced["requests"]["mean"]
    f["take_sequence"] = f.get("visit_sequence") or f.get("fetch_sequence")
    return f


def figures(R: dict[str, Any]) -> dict[str, Any]:
    """The numbers the targets name, from one run's results (parts that did not run are left out)."""
    f: dict[str, Any] = {}
    if R.get("e2e"):
        f["throughput"] = R["e2e"]["best"]["throughput"]
    if R.get("half"):
        lat = R["half"]["run"]["latency"]
        f.update(half_p50=lat["p50"], half_p99=lat["p99"], half_rate=R["half"]["run"]["offered_rate"])
    if R.get("sched"):
        s = R["sched"]
        f.update(
            delay_p50=s["delay"]["latency"]["p50"],
            delay_p99=s["delay"]["latency"]["p99"],
            cron_p50=s["cron"]["latency"]["p50"],
            cron_p99=s["cron"]["latency"]["p99"],
        )
    if R.get("peers"):
        p = R["peers"]
        f.update(
            equal_rate=p["equal_rate"],
            equal_p50=_lat(p, "p50"),
            equal_p99=_lat(p, "p99"),
            peer_throughput=p["mean_throughput"],
            pgqueuer_ratio=p["ratios"].get("pgqueuer"),
            peer_ratios=p["ratios"],
        )
    if R.get("takes"):
        f.update(take_figures(R["takes"]))
    if R.get("idle"):
        f.update(idle_rps=R["idle"]["wire_per_s"], idle_engine_rps=R["idle"]["engine_per_s"])
    f.update(write_figures(R))
    return f


def write_figures(R: dict[str, Any]) -> dict[str, Any]:
    """Issue 27's per-message costs: row writes and bytes (the CQL counted in part 1's best run: producer + daemon
    ÷ messages acked) and CPU split daemon / node / producer (medians over part 1's runs, from part 5's ceiling)."""
    from .stress import per_message

    f: dict[str, Any] = {}
    best = (R.get("e2e") or {}).get("best_run") or {}
    if best.get("cql"):
        pm = per_message(best)
        f.update(
            row_writes=pm["writes"],
            payload_writes=pm["payload_writes"],
            bytes_per_message=pm["bytes_written"],
            payload_bytes=pm["payload_bytes"],
        )
    budget = (R.get("ceiling") or {}).get("cpu_budget_ms")
    if budget:
        f.update(cpu_ms=sum(budget.values()), cpu_split_ms=budget)
    return f


def finite(x: Any) -> TypeGuard[float]:
    return isinstance(x, (int, float)) and not (isinstance(x, float) and (math.isnan(x) or math.isinf(x)))


@dataclass
class Target:
    key: str
    text: str
    show: Callable[[dict[str, Any]], str | None]  # the measured value, or None when the part did not run
    met: Callable[[dict[str, Any], dict[str, Any]], bool | None]  # (this run, before) -> met?
    facts: Callable[[dict[str, Any]], str] = lambda f: ""  # what the run itself says about a miss


def _ms(x: float | None) -> str:
    from .stats import fmt_ms

    if not finite(x):
        return "–"
    text = fmt_ms(x)
    return text if text.endswith(" s") else text + " ms"


def _peers_p99(f: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, v in f.get("equal_p99", {}).items() if k != "casque"}


def _equal_p99(f: dict[str, Any]) -> str | None:
    if "equal_p99" not in f:
        return None
    others = ", ".join(f"{k} {_ms(v)}" for k, v in sorted(_peers_p99(f).items(), key=lambda kv: kv[1]))
    return f"casque p99 {_ms(f['equal_p99'].get('casque'))} at {f['equal_rate']:,.0f} msg/s (peers: {others})"


def _equal_p99_met(f: dict[str, Any], _: dict[str, Any]) -> bool | None:
    peers = _peers_p99(f)
    mine = f.get("equal_p99", {}).get("casque")
    return None if not peers or not finite(mine) else all(mine < v for v in peers.values())


def _faster_at_equal(f: dict[str, Any]) -> str:
    mine = f.get("equal_p99", {}).get("casque")
    better = [k for k, v in _peers_p99(f).items() if finite(mine) and v <= mine]
    return f"lower p99 than casque's: {', '.join(better)}" if better else ""


def _lower_than_before(key: str, noise: float = 0.0) -> Callable[[dict[str, Any], dict[str, Any]], bool | None]:
    """Met when this run's figure is below the earlier run's (``--compare``) by more than ``noise`` (a fraction);
    not judged without one."""

    def met(f: dict[str, Any], before: dict[str, Any]) -> bool | None:
        now, then = f.get(key), before.get(key)
        return None if not (finite(now) and finite(then)) else now < then * (1.0 - noise)

    return met


def _at_most(key: str, limit: float) -> Callable[[dict[str, Any], dict[str, Any]], bool | None]:
    return lambda f, _: None if not finite(f.get(key)) else f[key] <= limit


def _at_least(key: str, limit: float) -> Callable[[dict[str, Any], dict[str, Any]], bool | None]:
    return lambda f, _: None if not finite(f.get(key)) else f[key] >= limit


def _writes_text(f: dict[str, Any]) -> str | None:
    if "row_writes" not in f:
        return None
    return (
        f"{_2(f['row_writes'])} row writes per message, {_2(f['payload_writes'])} of them with the payload; "
        f"{f['bytes_per_message']:,.0f} bytes bound per message (payload {f['payload_bytes']:,.0f} bytes)"
    )


def _writes_met(f: dict[str, Any], _: dict[str, Any]) -> bool | None:
    if not finite(f.get("row_writes")):
        return None
    return f["row_writes"] <= 3 and f["payload_writes"] <= 1.0 and f["bytes_per_message"] <= f["payload_bytes"] + 300


def _cpu_text(f: dict[str, Any]) -> str | None:
    if "cpu_ms" not in f:
        return None
    b = f["cpu_split_ms"]
    return (
        f"{f['cpu_ms']:.3f} ms (daemon {b['daemon_s']:.3f} + node {b['node_s']:.3f} + producer {b['producer_s']:.3f})"
    )


def _2(x: Any) -> str:
    return f"{x:.2f}" if finite(x) else "–"


def _take_text(f: dict[str, Any]) -> str | None:
    if "take_round_trips" not in f:
        return None
    return (
        f"{_2(f['take_round_trips'])} sequential round trips per take (mean; median "
        f"{_2(f.get('take_round_trips_p50'))}; "
        f"{f['take_round_trips_source']}), {_2(f.get('take_requests_mean'))} requests"
    )


TARGETS: list[Target] = [
    Target(
        "equal_p99",
        "Equal load (half the slowest peer's maximum): casque p99 send→start lower than every peer's",
        _equal_p99,
        _equal_p99_met,
        _faster_at_equal,
    ),
    Target(
        "equal_p50",
        "Equal load: casque p50 send→start ≤ 10 ms",
        lambda f: (
            None if "equal_p50" not in f else f"p50 {_ms(f['equal_p50'].get('casque'))} at {f['equal_rate']:,.0f} msg/s"
        ),
        lambda f, _: None if not finite(f.get("equal_p50", {}).get("casque")) else f["equal_p50"]["casque"] <= 10,
    ),
    Target(
        "half_p99",
        "Half of casque's maximum: p99 send→start ≤ 100 ms",
        lambda f: (
            None
            if "half_p99" not in f
            else f"p99 {_ms(f['half_p99'])} (p50 {_ms(f['half_p50'])}) at {f['half_rate']:,.0f} msg/s"
        ),
        _at_most("half_p99", 100),
    ),
    Target(
        "delay_p99",
        "Delayed messages: lateness p99 ≤ 50 ms",
        lambda f: None if "delay_p99" not in f else f"p99 {_ms(f['delay_p99'])} (p50 {_ms(f['delay_p50'])})",
        _at_most("delay_p99", 50),
    ),
    Target(
        "cron_p99",
        "Cron (every second): lateness p99 ≤ 50 ms",
        lambda f: None if "cron_p99" not in f else f"p99 {_ms(f['cron_p99'])} (p50 {_ms(f['cron_p50'])})",
        _at_most("cron_p99", 50),
    ),
    Target(
        "pgqueuer_ratio",
        "Throughput (no-op, one daemon, one node) ≥ 2× pgqueuer's in the same run (part 4)",
        lambda f: (
            None
            if not finite(f.get("pgqueuer_ratio"))
            else f"casque ÷ pgqueuer = {f['pgqueuer_ratio']:.2f}× ({f['peer_throughput']['casque']:,.0f} vs "
            f"{f['peer_throughput']['pgqueuer']:,.0f} msg/s)"
        ),
        _at_least("pgqueuer_ratio", 2.0),
    ),
    Target(
        "throughput",
        "Throughput ≥ 5,000 msg/s (no-op, one daemon, one node; part 1's best setting)",
        lambda f: None if "throughput" not in f else f"{f['throughput']:,.0f} msg/s",
        _at_least("throughput", 5000),
    ),
    Target(
        "idle_rps",
        "Idle cost: CQL requests/s of an idle daemon serving 16 shards, lower than the compared run's (`--compare`; "
        "by more than the 25 % the same engine moved between runs: 267 to 345 requests/s)",
        lambda f: (
            None
            if "idle_rps" not in f
            else f"{f['idle_rps']:,.1f} requests/s on the wire ({f['idle_engine_rps']:,.1f}/s through the engine)"
        ),
        _lower_than_before("idle_rps", noise=0.25),
    ),
    Target(
        "take_round_trips",
        "Round trips per take (message due → handler start), fewer than the compared run's (`--compare`)",
        _take_text,
        _lower_than_before("take_round_trips"),
        lambda f: f"the usual take: {f['take_sequence']}" if f.get("take_sequence") else "",
    ),
    Target(
        "row_writes",
        "Row writes per message (send → ack): ≤ 3, one with the payload; bytes per message ≤ payload + 300",
        _writes_text,
        _writes_met,
    ),
    Target(
        "cpu_per_message",
        "CPU per message, daemon + node + producer: half of 0.730 ms (the full run of 2026-11-23)",
        _cpu_text,
        _at_most("cpu_ms", CPU_BEFORE_MS / 2),
    ),
]
