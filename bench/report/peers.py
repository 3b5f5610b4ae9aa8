"""The sections comparing casque with others and looking inside it: the peer task queues on the same
workload, cassandra-stress against the same node, and the daemon's profile at full load."""

from __future__ import annotations

from typing import Any

from .markdown import _lat, _n, _table


def section_peers(R: dict[str, Any], img: str) -> str:
    p = R.get("peers")
    if not p:
        return ""
    rows = []
    for r in p["runs"]:
        rows.append(
            [
                r["label"].replace("peers_", ""),
                _n(r["throughput"]),
                _n(r["send_rate"]),
                _lat(r["latency"]),
                _n(1000 * (r["cpu"].get("daemon_s", r["cpu"].get("worker_s", 0))) / r["n"], 3),
            ]
        )
    means = p.get("mean_throughput", {})
    mrows = [
        [name, _n(tp), "" if name == "casque" else f"**{p['casque_throughput'] / tp:.2f}×**"]
        for name, tp in means.items()
    ]
    eq = []
    for r in p["equal"]:
        eq.append([r["system"], _n(r.get("offered_rate")), _n(r["throughput"]), _lat(r["latency"])])
    first_run = {r["system"]: r for r in reversed(p["runs"])}  # one line per system
    cfg = [
        f"- **{name}**: " + "; ".join(f"{k}: {v}" for k, v in r["settings"].items())
        for name, r in first_run.items()
        if name != "casque"
    ]
    casque_cfg = next(r for r in p["runs"] if r["system"] == "casque")["settings"]
    cfg.insert(
        0,
        "- **casque**: "
        + ", ".join(f"{k} {v}" for k, v in casque_cfg.items())
        + "; Cassandra commitlog_sync periodic (10 s)",
    )
    return "\n".join(
        [
            "## 4. Peers: same machine, same run, same workload",
            "",
            f"{_n(p['n'])} no-op tasks each, sent as fast as each system's producer API allows, one worker process, at "
            f"most {p['concurrency']} "
            'tasks running at once. "Acked" is read from each broker (casque: the ack batch written). The runs are '
            "interleaved "
            f"({p.get('rounds', 1)} round(s) of "
            f"{', '.join(p.get('systems', ['casque', 'Celery', 'arq', 'pgqueuer']))}, then casque once more); "
            "each system's throughput is the mean of its runs.",
            "",
            _table(["system", "mean msg/s", "casque ÷ system"], mrows),
            "",
            _table(
                ["run", "msg/s", "sent at msg/s", "p50 ms", "p95 ms", "p99 ms", "max ms", "worker CPU ms/msg"], rows
            ),
            "",
            "Latency at full load is mostly time spent queued behind the backlog (the producers outrun every "
            "consumer), so it is shown "
            "for completeness; the equal-load runs below compare latency.",
            "",
            f"Latency at equal load: every system offered {_n(p['equal_rate'])} msg/s (half the slowest peer's "
            "maximum) for the same time:",
            "",
            _table(["system", "offered msg/s", "msg/s", "p50 ms", "p95 ms", "p99 ms", "max ms"], eq),
            "",
            f"![latency CDF]({img}/bench-latency-cdf.png)",
            "",
            "Configurations (each as its documentation recommends for throughput; durability no stronger than the "
            "Cassandra node's):",
            "",
            *cfg,
            "",
        ]
    )


def section_stress(R: dict[str, Any]) -> str:
    s, c = R.get("stress"), R.get("ceiling")
    if not s:
        return ""
    rows = [
        [
            w,
            _n(s[w]["ops_per_s"]),
            _n(s[w]["ops"]),
            str(s[w].get("latency_mean_ms")),
            str(s[w].get("latency_p99_ms")),
            _n(s[w].get("node_cpu_ms_per_op"), 3),
            f"`{s[w]['command']}`",
        ]
        for w in ("write", "mixed")
    ]
    out = [
        "## 5. Physical limit: cassandra-stress on the same node",
        "",
        f"cassandra-stress {s['version']} (Apache publishes no 5.0 tool tarball on Maven Central; the 4.0-alpha2 tool "
        "speaks "
        "native protocol v4 to the 5.0 node), same node, same run, keyspace casque_bench.",
        "",
        _table(["workload", "op/s", "ops", "mean ms", "p99 ms", "node CPU ms/op", "command"], rows),
        "",
    ]
    if c:
        pm = c["per_message"]
        out += [
            f"CQL per message, counted in the end-to-end run shown in part 1 (producer + daemon, ÷ messages acked): "
            f"{pm['requests']:.3f} requests ({pm['read_requests']:.3f} reads, {pm['write_requests']:.3f} writes of "
            "which "
            f"{pm['batch_requests']:.3f} batches), {pm['reads'] + pm['writes']:.2f} statements ({pm['reads']:.3f} "
            f"reads, {pm['writes']:.2f} row writes), "
            f"{pm['lwt']:.4f} LWT.",
            "",
            "casque's best below is the best setting's median throughput in part 1; CPU per message is the median "
            "over the "
            f"{c.get('cpu_runs', 1)} end-to-end runs (the node is shared with other engineers' tests, so one run's "
            "node CPU can carry "
            "their load).",
            "",
            _table(
                ["ceiling", "msg/s", "casque's best", "casque % of ceiling"],
                [
                    [
                        "node CPU (stress's CPU per write × write op/s ÷ casque's node CPU per message)",
                        _n(c.get("cpu_ceiling")),
                        _n(c["throughput"]),
                        f"{c.get('pct_of_cpu_ceiling', float('nan')):.0f}%",
                    ],
                    [
                        "per request (batches cost one write: optimistic)",
                        _n(c["request_ceiling"]),
                        _n(c["throughput"]),
                        f"{c['pct_of_request_ceiling']:.0f}%",
                    ],
                    [
                        "per statement (batching saves nothing: pessimistic)",
                        _n(c["statement_ceiling"]),
                        _n(c["throughput"]),
                        f"{c['pct_of_statement_ceiling']:.0f}%",
                    ],
                ],
            ),
            "",
            f"Derived costs: a write {c['write_cost_us']:.0f} µs, a read {c['read_cost_us']:.0f} µs of node time (1/W, "
            "2/M − 1/W). "
            f"The node spent {c['node_cpu_ms_per_message']:.3f} ms CPU per casque message (median), "
            f"{c.get('node_cpu_ms_per_write_op', 0):.3f} ms per stress write.",
            "",
        ]
        b = c.get("cpu_budget_ms")
        if b:
            out += [
                f"CPU budget of one message (medians): daemon {b['daemon_s']:.3f} ms + Cassandra node "
                f"{b['node_s']:.3f} ms + producer "
                f"{b['producer_s']:.3f} ms = {sum(b.values()):.3f} ms, so {c['cores']} cores could carry at most "
                f"{_n(c['cpu_bound'])} msg/s "
                "if casque had the machine to itself (it does not: other engineers' nodes and tests run beside it).",
                "",
            ]
    return "\n".join(out)


def section_profile(R: dict[str, Any], img: str) -> str:
    p = R.get("profile")
    if not p or "components" not in p:
        return ""
    comps = [[n.replace("(counting)", "(no-op handler, ack counter)"), f"{v:.1f}%"] for n, v in p["components"][:10]]
    selfs = [[f"`{n}`", f"{v:.1f}%"] for n, v in p["self"][:10]]
    incl = [[f"`{n}`", f"{v:.1f}%"] for n, v in p["casque_inclusive"][:10]]
    run = p["run"]
    return "\n".join(
        [
            "## 6. Profile of the daemon at full load",
            "",
            f"`py-spy record --rate 100 --gil --format raw` on the daemon process while it took {_n(run['n'])} "
            "messages "
            f"({_n(run['throughput'])} msg/s, {p['samples']:,} samples, {p['cpu_ms_per_message']:.3f} ms of daemon CPU "
            "per message). "
            f"**The daemon's Python held the GIL {100 * p.get('gil_busy', 0):.0f}% of the run's wall time**: the rest "
            "it waited for Cassandra. "
            "Raw stacks: bench/out/profile/daemon.txt. The driver's compiled (Cython) code has no Python frames, so "
            "its time shows "
            "under the casque line that calls it: `MessageTable.insert_message`/`delete_message` is the driver binding "
            "and serialising "
            "a statement, `Database.run` is its `execute_async` (encoding the request, batches included).",
            "",
            f"![profile]({img}/bench-profile.png)",
            "",
            _table(["component (self time)", "share"], comps),
            "",
            _table(["hottest functions (self)", "share"], selfs),
            "",
            _table(["casque functions (inclusive)", "share"], incl),
            "",
        ]
    )
