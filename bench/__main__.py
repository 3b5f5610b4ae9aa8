"""``python -m bench [--quick] [--only PARTS] [--compare FILE] [--report-only] [--no-docs]``; ``python -m bench
setup``; ``python -m bench many-queues [--quick] [--write-docs] [--report-only]`` (bench/many_queues.py, a scenario of
its own); ``python -m bench nemesis [--minutes N] [--seed N]`` (bench/nemesis: random faults from a seed against a
3-node ring, checked by a ledger); ``python -m bench owners [--quick] [--write-docs] [--report-only]``
(bench/owners.py: owners long-polling their own queues, beside ElasticMQ).

Runs the parts in order (each prints its progress; the list is bench/plan.py ``PARTS``), saves every result to
bench/out/results-<mode>.json as soon as it is measured (so a failure later loses nothing, and ``--only`` can re-run
one part), with the node the run measured on (bench/node.py: at the start, and what it did during each part), draws
the plots and writes the report. ``--compare FILE`` names an earlier run's results file: its figures become the
report's "before" column. sizes, sqs and sqs-fifo keep results files and docs sections of their own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from . import node
from .env import KEYSPACE, ROOT, machine, out_dir, progress, versions
from .plan import ENGINE_PARTS, FULL, MEASURED, OWN_FILE_PARTS, PARTS, QUICK, SEPARATE, Plan


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description="casque's benchmark suite (docs/benchmarks.md).")
    p.add_argument(
        "command",
        nargs="?",
        choices=["run", "setup", "many-queues", "nemesis", "owners"],
        default="run",
        help="setup: only install what the bench needs; many-queues: the per-user-queues scenario "
        "(bench/many_queues.py); nemesis: faults at random from a seed, checked by a ledger (bench/nemesis); owners: "
        "per-user queues long-polled by thousands of owners, beside ElasticMQ (bench/owners.py)",
    )
    p.add_argument("--quick", action="store_true", help="the quick sizes of every part instead of the full ones")
    p.add_argument("--only", default="", help=f"comma-separated parts to run: {','.join(PARTS)} (default: all)")
    p.add_argument("--report-only", action="store_true", help="re-render plots and report from the saved results")
    p.add_argument(
        "--compare",
        type=Path,
        metavar="FILE",
        help="an earlier run's results file (bench/out/results-<mode>.json, kept by you): the report's before column",
    )
    p.add_argument("--moto-checkout", type=Path, help="moto-sqs only: a moto source tree (default: moto's sdist)")
    p.add_argument("--moto-python", help="moto-sqs only: an interpreter with moto, pytest and freezegun")
    p.add_argument(
        "--size",
        choices=["quick", "full", "test", "light", "medium"],
        help="many-queues only: a size of bench/many_queues.py (default: full, or quick with --quick); test and light "
        "never go to docs/",
    )
    p.add_argument("--minutes", type=float, default=60.0, help="nemesis only: how long the faults go on")
    p.add_argument("--seed", type=int, default=1, help="nemesis only: the seed of the fault schedule")
    p.add_argument("--write-docs", action="store_true", help="write docs/benchmarks.md even in quick mode")
    p.add_argument(
        "--systems",
        default="casque,elasticmq",
        help="sqs-fifo only: the servers to measure (casque, elasticmq, or both; a subset goes to docs/ only with "
        "--write-docs)",
    )
    p.add_argument(
        "--no-docs",
        action="store_true",
        help="write bench/out/report-<mode>.md even in full mode (a partial run must not replace docs/ figures of "
        "another run)",
    )
    p.add_argument(
        "--daemon-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a [worker] option for every casque daemon (a what-if: results go to results-<mode>-<options>.json, "
        "never to docs/), e.g. --daemon-option max_poll_interval=0.1",
    )
    return p.parse_args(argv)


def daemon_options(pairs: list[str]) -> dict[str, Any]:
    import tomllib

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"bench: --daemon-option wants KEY=VALUE, got {pair!r}")
        try:
            out[key.strip()] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            out[key.strip()] = value
    return out


SUFFIX = ""  # set for what-if runs (--daemon-option), so they never overwrite the real results


def results_path(plan: Plan) -> Path:
    return out_dir() / f"results-{plan.name}{SUFFIX}.json"


def load(plan: Plan) -> dict[str, Any]:
    path = results_path(plan)
    return json.loads(path.read_text()) if path.exists() else {}


def save(plan: Plan, R: dict[str, Any]) -> None:
    path = results_path(plan)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(R, default=str))
    tmp.replace(path)


async def measure(plan: Plan, parts: list[str], R: dict[str, Any]) -> None:
    from daemon.engine.client import Casque

    from . import cqlcount, e2e, fair_queues, idle, peers, profiling, schedule, stress, takes, tombstones
    from .env import bench_settings

    cqlcount.install()  # the producer's CQL is counted too
    cq = await Casque.connect(bench_settings())
    try:
        rows = await cq.db.run("SELECT release_version FROM system.local")
        R.setdefault("meta", {}).setdefault("versions", {})["Cassandra"] = rows[0].release_version if rows else "?"
        if "e2e" in parts:
            with node.Watch(R, "e2e"):
                R["e2e"] = await e2e.sweep(cq, plan)
            save(plan, R)
            with node.Watch(R, "half"):
                R["half"] = await e2e.half_load(cq, plan, R["e2e"]["best"])
            save(plan, R)
        best = (R.get("e2e") or {}).get("best") or _saved_best(plan) or _defaults()
        steps = [
            ("takes", lambda: takes.run(cq, plan)),
            ("idle", lambda: idle.run(cq, plan)),
            ("sched", lambda: schedule.run(cq, plan, best)),
            ("tomb", lambda: tombstones.run(cq, plan, best)),
            ("peers", lambda: peers.run(cq, plan, best)),
            ("profile", lambda: profiling.run(cq, plan, best)),
            ("fair", lambda: fair_queues.run(cq, plan)),
        ]
        for name, step in steps:
            if name in parts:
                with node.Watch(R, name):
                    R[name] = await step()
                save(plan, R)
            if name == "peers" and "stress" in parts:  # after the peers, before the profile
                with node.Watch(R, "stress"):
                    R["stress"] = await asyncio.to_thread(stress.run, plan)
                save(plan, R)
        if R.get("stress") and R.get("e2e"):
            R["ceiling"] = ceiling_of(R)
            c = R["ceiling"]
            progress(
                f"  ceiling: {c['request_ceiling']:,.0f} msg/s per request, {c['statement_ceiling']:,.0f} per "
                f"statement; "
                f"casque at {c['pct_of_request_ceiling']:.0f}% / {c['pct_of_statement_ceiling']:.0f}%"
            )
            save(plan, R)
    finally:
        await cq.close()


def ceiling_of(R: dict[str, Any]) -> dict[str, Any]:
    from . import stress

    e2e = R["e2e"]
    return stress.ceiling(
        R["stress"], e2e["best_run"], runs=e2e["grid"] + e2e.get("confirm", []), throughput=e2e["best"]["throughput"]
    )


def _record_duration(R: dict[str, Any], started: float, partial: bool) -> None:
    minutes = (time.time() - started) / 60
    if partial:
        R["meta"]["reruns"][-1]["duration_min"] = minutes
    else:
        R["meta"]["duration_min"] = minutes


def _saved_best(plan: Plan) -> dict[str, Any] | None:
    """The best setting of the last real run of this mode (a what-if or a partial run reuses it)."""
    path = out_dir() / f"results-{plan.name}.json"
    if not path.exists():
        return None
    best: dict[str, Any] | None = (json.loads(path.read_text()).get("e2e") or {}).get("best")
    return best


def _defaults() -> dict[str, Any]:
    from daemon.base.config import WorkerSettings

    w = WorkerSettings()
    return {"consumers": w.consumers, "batch_size": w.batch_size, "throughput": 0.0}


def separate(plan: Plan, args: argparse.Namespace, parts: list[str], R: dict[str, Any]) -> int:
    """The parts that run in processes of their own (plan ``SEPARATE``), in order; 1 if one found a fault."""
    from . import moto_sqs, mq_parked, mq_settle, pipeline_load, soak, sqs_cpu

    run = {
        "settle": lambda: mq_settle.part(plan),
        "parked": lambda: mq_parked.part(plan),
        "pipeline": lambda: pipeline_load.part(plan),
        "soak": lambda: soak.part(plan),
        "moto-sqs": lambda: moto_sqs.part(args.moto_checkout, args.moto_python),
        "sqs-cpu": lambda: sqs_cpu.part(plan is QUICK),
    }
    rc = 0
    for name in SEPARATE:
        if name in parts:
            progress(f"part {name}")
            with node.Watch(R, name):
                R[name] = run[name]()
            save(plan, R)
            rc = rc or (0 if R[name].get("ok", True) else 1)
    return rc


def compared(path: Path | None) -> dict[str, Any] | None:
    """The results file ``--compare`` names (an earlier run's bench/out/results-<mode>.json), or None."""
    if path is None:
        return None
    try:
        before: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"bench: --compare {path}: {exc}") from exc
    before["_path"] = str(path)
    return before


def render(plan: Plan, R: dict[str, Any], to_docs: bool, before: dict[str, Any] | None = None) -> Path:
    from . import plots, report

    d = out_dir()
    if R.get("stress") and R.get("e2e"):
        R["ceiling"] = ceiling_of(R)  # recomputed from the saved runs, so a report-only render uses the current rule
    if R.get("e2e"):
        plots.throughput_vs_consumers(R["e2e"], d / "bench-throughput.png")
    curves: dict[str, Any] = {}
    if R.get("e2e"):
        curves["casque @ full load"] = R["e2e"]["best_cdf"]
    if R.get("half"):
        curves["casque (half load)"] = R["half"]["cdf"]
    if R.get("peers"):
        rate = R["peers"]["equal_rate"]
        for name, cdf in R["peers"]["cdf"].items():
            curves[f"{name} @ {rate:.0f} msg/s"] = cdf
        then = (before or {}).get("peers") or {}
        if then.get("cdf", {}).get("casque"):
            curves[f"casque before (--compare) @ {then['equal_rate']:.0f} msg/s"] = then["cdf"]["casque"]
    if curves:
        plots.latency_cdf(
            curves,
            d / "bench-latency-cdf.png",
            "send → handler start: casque (best setting) and the peers at equal load",
        )
    if R.get("tomb"):
        plots.tombstones(R["tomb"], d / "bench-tombstones.png")
    if R.get("profile") and R["profile"].get("components"):
        plots.profile_bars(R["profile"], d / "bench-profile.png")
    return report.write(R, d, to_docs, name=f"report-{plan.name}{SUFFIX}.md", before=before)


def many_queues(args: argparse.Namespace) -> int:
    """The many-queues scenario: its own results file, plot and docs section (quick or full size)."""
    from . import many_queues as mq
    from . import plots, report

    size = mq.SIZES[args.size] if args.size else mq.QUICK if args.quick else mq.FULL
    path = out_dir() / f"many-queues-{size.name}.json"
    if args.report_only:
        R = json.loads(path.read_text())
    else:
        engine = versions()["casque"]  # the code that runs: read before, as commits may land during a long run
        R = asyncio.run(mq.scenario(size))
        R["machine"] = machine()
        R["engine"] = engine
        R["full_expected_min"] = mq.full_estimate_min(R)
        path.write_text(json.dumps(R, default=str))
        progress(mq.headline(R))
    before = out_dir() / f"many-queues-{size.name}-before.json"  # a run of the engine before bounded caches, if kept
    baseline = None
    if before.exists():
        B = json.loads(before.read_text())
        baseline = (f"before the LRU caches ({B.get('engine', '?')})", B["rss"]["samples"])
        R["baseline"] = {
            "engine": B.get("engine"),
            "queues": B["size"]["queues"],
            "rss": {k: v for k, v in B["rss"].items() if k != "samples"},
            "reads": B["reads"]["by_kind"],
            "latency": B["latency"],
            "ledger": B["ledger"],
            "started": B["started"],
        }
    light = out_dir() / "many-queues-light.json"  # the same path unloaded (--size light), if it was run
    if light.exists() and size is not mq.LIGHT:
        L = json.loads(light.read_text())
        R["light"] = {
            "started": L["started"],
            "size": L["size"],
            "latency": L["latency"],
            "live": L["live"],
            "cql_latency_ms": L["reads"].get("cql_latency_ms"),
            "load": (L.get("machine") or {}).get("load_at_start"),
        }
    parked = sorted(out_dir().glob("many-queues-parked-*.json"))  # the parked part's probe, if it was run
    if parked:
        R["parked"] = json.loads(parked[-1].read_text())
    to_docs = (args.write_docs or size is mq.FULL) and size in (mq.QUICK, mq.FULL)
    plot = "bench-many-queues-rss.png" if size in (mq.QUICK, mq.FULL) else f"bench-many-queues-rss-{size.name}.png"
    plots.rss_vs_queues(R["rss"]["samples"], out_dir() / plot, R["size"]["name"], baseline)
    target = report.write_many_queues(R, out_dir(), to_docs=to_docs)
    progress(f"report: {target.relative_to(ROOT)}")
    return 1 if R["ledger"]["lost"] else 0


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.command == "many-queues":
        return many_queues(args)
    if args.command == "nemesis":
        from .nemesis import run

        return run.main(args.minutes, args.seed)
    if args.command == "owners":
        from . import owners

        return owners.part(args.quick, to_docs=args.write_docs or not args.quick, report_only=args.report_only)
    if args.command == "setup":
        from . import setup

        setup.all_steps()
        progress("set-up done")
        return 0
    plan = QUICK if args.quick else FULL
    global SUFFIX
    overrides = daemon_options(args.daemon_option)
    if overrides:
        from . import daemonproc

        daemonproc.OVERRIDES.update(overrides)
        SUFFIX = "-" + "-".join(f"{k}={v}" for k, v in sorted(overrides.items()))
    parts = [p.strip() for p in args.only.split(",") if p.strip()] or list(PARTS)
    unknown = set(parts) - set(PARTS)
    if unknown:
        print(f"bench: unknown part(s) {', '.join(sorted(unknown))}: use {', '.join(PARTS)}", file=sys.stderr)
        return 2
    before = compared(args.compare)
    own = [p for p in OWN_FILE_PARTS if p in parts]
    parts = [p for p in parts if p not in OWN_FILE_PARTS]
    # Alone, the parts with results files of their own run without the engine parts' set-up or report (it would
    # re-render docs/ from other results); the node's figures during them go to the engine parts' results file.
    rc, R = engine_parts(args, plan, parts, overrides) if parts else (0, load(plan))
    run_own = {"sizes": sizes_part, "sqs": sqs_part, "sqs-fifo": sqs_fifo_part}
    for name in own:
        if args.report_only:
            rc = run_own[name](args, plan) or rc
            continue
        with node.Watch(R, name):
            rc = run_own[name](args, plan) or rc
        save(plan, R)
    if parts:
        target = render(plan, R, (args.write_docs or plan is FULL) and not overrides and not args.no_docs, before)
        save(plan, R)  # with the ceiling as the report computed it
        progress(f"report: {target.relative_to(ROOT)}")
    return rc


def sizes_part(args: argparse.Namespace, plan: Plan) -> int:
    """bench/sizes.py: casque, pgqueuer and Dramatiq at three sizes, with the best setting of the run (or the
    last saved one), its own docs section."""
    from . import setup, sizes

    if not args.report_only:
        setup.cassandra_node()
    to_docs = (args.write_docs or plan is FULL) and not args.no_docs
    best = _saved_best(plan) or _defaults()
    return sizes.part(plan is QUICK, to_docs, best, report_only=args.report_only)


def sqs_part(args: argparse.Namespace, plan: Plan) -> int:
    """bench/sqs.py: the standard queue's SQS face beside ElasticMQ, 3 rounds (1 quick), its own docs section."""
    from . import setup, sqs

    if not args.report_only:
        setup.cassandra_node()
    to_docs = (args.write_docs or plan is FULL) and not args.no_docs
    quick = plan is QUICK
    return sqs.part(1 if quick else 3, to_docs, report_only=args.report_only, quick=quick)


def sqs_fifo_part(args: argparse.Namespace, plan: Plan) -> int:
    """bench/sqs_fifo.py at the plan's size: its own results file, plot and section of docs/benchmarks.md."""
    from . import setup, sqs_fifo

    systems = sqs_fifo.parse_systems(args.systems)
    if "casque" in systems and not args.report_only:
        setup.cassandra_node()
    size = sqs_fifo.QUICK if plan is QUICK else sqs_fifo.FULL
    to_docs = (args.write_docs or (plan is FULL and len(systems) == len(sqs_fifo.SYSTEMS))) and not args.no_docs
    return sqs_fifo.part(size, systems, to_docs, report_only=args.report_only)


def engine_parts(
    args: argparse.Namespace, plan: Plan, parts: list[str], overrides: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    """The parts whose results go to bench/out/results-<mode>.json (ENGINE_PARTS): measured, saved part by part;
    main() renders the report between the bench markers."""
    from . import setup

    R = load(plan)
    if args.report_only:
        return 0, R
    started = time.time()
    setup.all_steps(peers="peers" in parts, stress="stress" in parts)
    meta = R.setdefault("meta", {})
    partial = set(parts) != set(ENGINE_PARTS) and "machine" in meta
    at_start = node.describe()
    if partial:  # a re-run of some parts: the header keeps the full run's date and lists the re-run
        meta.setdefault("reruns", []).append(
            {
                "parts": parts,
                "date": machine()["date"],
                "load_at_start": machine()["load_at_start"],
                "node": at_start,
            }
        )
    else:
        meta.update({"mode": plan.name, "machine": machine(), "parts": parts, "reruns": [], "node": at_start})
        meta.pop("node_parts", None)
    meta.update({"keyspace": KEYSPACE, "daemon_options": overrides})
    meta.setdefault("versions", {}).update(versions())
    progress(f"casque bench, {plan.name} mode: {', '.join(parts)}")
    rc = 0
    try:
        if set(parts) & set(MEASURED):
            asyncio.run(measure(plan, parts, R))
        rc = separate(plan, args, parts, R)
    except Exception:
        traceback.print_exc()
        progress("a part failed: the results measured so far are saved; the report shows them")
        rc = 1
    _record_duration(R, started, partial)
    save(plan, R)
    return rc, R


if __name__ == "__main__":
    sys.exit(main())
