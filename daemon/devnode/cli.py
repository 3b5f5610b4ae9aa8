"""``casque cassandra ...``: start/stop/inspect the development cluster from a shell.

    casque cassandra start [--nodes N] [--name NAME] [--port P] ...
    casque cassandra stop [--name NAME]
    casque cassandra status [--name NAME] [--json]
    casque cassandra cqlsh [--name NAME] [--node I] [cqlsh args...]
    casque cassandra nodetool [--name NAME] [--node I] [nodetool args...]

Verbs other than ``start`` reuse the node count and ports a cluster was last started
with (saved in ``<home>/<name>/cluster.json``), so ``stop --name ring`` just works.
Every ``func`` returns an exit code; a :class:`DevnodeError` is printed as its one line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .cluster import start, status, stop
from .download import ensure_cassandra
from .errors import DevnodeError
from .java import find_java
from .jvm import nodetool_command
from .spec import ClusterSpec, default_home, load_saved_spec

__all__ = ["add_cli", "main"]


def _spec_from(args: argparse.Namespace) -> ClusterSpec:
    """Explicit flags win, then the cluster's saved spec, then the defaults."""
    home = Path(args.home) if getattr(args, "home", None) else default_home()
    spec = load_saved_spec(args.name, home) or ClusterSpec(name=args.name, home=home)
    changes: dict[str, Any] = {}
    for attr, field in (
        ("nodes", "nodes"),
        ("port", "native_port"),
        ("storage_port", "storage_port"),
        ("jmx_port", "jmx_base"),
        ("heap", "heap"),
    ):
        value = getattr(args, attr, None)
        if value is not None:
            changes[field] = value
    return replace(spec, **changes) if changes else spec


def _guarded(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except DevnodeError as exc:
            print(str(exc), file=sys.stderr)
            return 1
        except ValueError as exc:  # invalid --name/--nodes/--heap rejected by ClusterSpec
            print(f"casque: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(
                "casque: interrupted (nodes already launched keep running; `casque cassandra stop` stops them)",
                file=sys.stderr,
            )
            return 130

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


@_guarded
def _cmd_start(args: argparse.Namespace) -> int:
    spec = _spec_from(args)
    start(spec, timeout=args.timeout, parallel=not args.sequential)
    return 0


@_guarded
def _cmd_stop(args: argparse.Namespace) -> int:
    spec = _spec_from(args)
    before = status(spec)
    stop(spec, timeout=args.timeout)
    stopped = [n.name for n in before.nodes if n.running]
    print(
        f"casque: stopped {', '.join(stopped)} of cluster '{spec.name}'"
        if stopped
        else f"casque: cluster '{spec.name}' was not running"
    )
    return 0


@_guarded
def _cmd_status(args: argparse.Namespace) -> int:
    st = status(_spec_from(args))
    if args.json:
        print(json.dumps(st.to_json(), indent=2))
    else:
        print(st.format())
    return 0 if st.ready else 3  # like `systemctl status`: non-zero when not (fully) up


def _node_index(args: argparse.Namespace, spec: ClusterSpec) -> int:
    if not 1 <= args.node <= spec.nodes:
        raise DevnodeError(f"casque: cluster '{spec.name}' has nodes 1..{spec.nodes}, not --node {args.node}")
    return args.node


@_guarded
def _cmd_cqlsh(args: argparse.Namespace) -> int:
    spec = _spec_from(args)
    node = spec.node(_node_index(args, spec))
    # The cqlsh console script of *this* environment (the PyPI package is a dependency).
    local = Path(sys.executable).parent / "cqlsh"
    exe = str(local) if local.is_file() else shutil.which("cqlsh")
    if not exe:
        raise DevnodeError("casque: cqlsh is not installed in this environment; pip install 'cqlsh>=6.2,<7'")
    argv = [exe, *args.args, node.address, str(node.native_port)]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, argv)  # replaces this process: cqlsh owns the terminal and Ctrl-C
    return 0  # pragma: no cover


@_guarded
def _cmd_nodetool(args: argparse.Namespace) -> int:
    spec = _spec_from(args)
    node = spec.node(_node_index(args, spec))
    java = find_java()
    home = ensure_cassandra(spec.version)
    return subprocess.call(nodetool_command(java, home, node.jmx_port, list(args.args)))


class _PassThroughParser(argparse.ArgumentParser):
    """Parses only its own leading options; everything after them goes to ``args.args``.

    Lets ``casque cassandra cqlsh -e "SELECT ..."`` reach cqlsh untouched (plain argparse
    would reject ``-e`` as unknown). ``--`` ends our options explicitly.
    """

    _own_with_value = ("--name", "--node", "--home")
    _own_with_equals = tuple(o + "=" for o in _own_with_value)

    def parse_known_args(self, args=None, namespace=None):
        argv = list(sys.argv[1:] if args is None else args)
        ours: list[str] = []
        i = 0
        while i < len(argv):
            a = argv[i]
            if a == "--":
                i += 1
                break
            if a in self._own_with_value:
                ours += argv[i : i + 2]
                i += 2
            elif a.startswith(self._own_with_equals) or a in ("-h", "--help"):
                ours.append(a)
                i += 1
            else:
                break
        ns, extras = super().parse_known_args(ours, namespace)
        ns.args = argv[i:]
        return ns, extras


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", default="dev", help="cluster name; its nodes live in <home>/<name>/ (default: dev)")
    p.add_argument(
        "--home", default=None, help="directory holding clusters (default: $CASQUE_HOME or ~/.local/share/casque)"
    )


def add_cli(subparsers: Any) -> None:
    """Register ``cassandra`` and its sub-verbs on an argparse subparsers object.

    Each leaf parser sets ``func(args) -> int`` (exit code).
    """
    top = subparsers.add_parser(
        "cassandra",
        help="run a local Apache Cassandra for development and tests",
        description="Start/stop a real Cassandra 5.0 (one node or a small cluster on "
        "127.0.0.1..N) as local JVM processes.",
    )
    verbs = top.add_subparsers(dest="cassandra_verb", metavar="VERB")
    verbs.required = True

    p = verbs.add_parser("start", help="start the cluster (reuses running nodes) and wait for CQL")
    _common(p)
    p.add_argument("--nodes", type=int, default=None, help="number of nodes (default: 1)")
    p.add_argument("--port", type=int, default=None, help="CQL native port (default: 9042)")
    p.add_argument("--storage-port", type=int, default=None, help="inter-node storage port (default: 7000)")
    p.add_argument("--jmx-port", type=int, default=None, help="JMX port of node1; node i uses this+i-1 (default: 7199)")
    p.add_argument(
        "--heap",
        default=None,
        help="JVM heap per node (default: $CASQUE_NODE_HEAP, or sized for the box)",
    )
    p.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for CQL")
    p.add_argument("--sequential", action="store_true", help="start non-seed nodes one at a time instead of together")
    p.set_defaults(func=_cmd_start)

    p = verbs.add_parser("stop", help="stop every node of the cluster")
    _common(p)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait after SIGTERM before SIGKILL")
    p.set_defaults(func=_cmd_stop)

    p = verbs.add_parser(
        "status", help="show nodes, pids, CQL readiness, log paths (exit 0 only if every node answers CQL)"
    )
    _common(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_status)

    for verb, fn, what in (("cqlsh", _cmd_cqlsh, "cqlsh"), ("nodetool", _cmd_nodetool, "nodetool")):
        p = verbs.add_parser(
            verb,
            help=f"run {what} against a node; other arguments go to {what}",
            usage=f"%(prog)s [--name NAME] [--node I] [--] [{what} args...]",
        )
        p.__class__ = _PassThroughParser
        _common(p)
        p.add_argument("--node", type=int, default=1, help="node index (default: 1)")
        p.set_defaults(func=fn, args=[])


def main(argv: list[str] | None = None) -> int:
    """Standalone entry point: ``python -m daemon.devnode start`` == ``casque cassandra start``."""
    parser = argparse.ArgumentParser(prog="python -m daemon.devnode")
    sub = parser.add_subparsers(dest="command")
    add_cli(sub)
    args = parser.parse_args(["cassandra", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))
