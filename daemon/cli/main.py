"""The ``casque`` command line: the parser, and one-line errors with exit codes.

Every command prints a one-line ``casque: ...`` error and exits non-zero on bad input or an
unreachable Cassandra (2: usage or config, 3: key conflict, 4: not found, 5: storage). Read commands
take ``--json`` for scripts. Each command group lives in its own module of this package.
"""

from __future__ import annotations

import argparse

from daemon import __version__
from daemon.base.terminal import run_command
from daemon.cli import admin, messages, queues, run, schema, serve, web


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), argv)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="casque", description="A durable task queue and scheduler on Apache Cassandra.")
    p.add_argument(
        "-c",
        "--config",
        help="TOML config file (default: $CASQUE_CONFIG, ./config/casque.toml, /etc/casque/casque.toml)",
    )
    p.add_argument("--version", action="version", version=f"casque {__version__}")
    sub = p.add_subparsers(metavar="COMMAND")
    from daemon.devnode import add_cli as add_cassandra_cli

    add_cassandra_cli(sub)
    for group in (schema, queues, messages, run, admin, serve, web):
        group.add_cli(sub)
    from pipeline.cli import add_cli as add_pipeline_cli

    add_pipeline_cli(sub)
    return p
