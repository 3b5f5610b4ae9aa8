"""``casque schema apply``."""

from __future__ import annotations

import argparse
from typing import Any

from daemon.base.terminal import settings_of
from daemon.engine.queues.index_backfill import backfill
from daemon.engine.storage.schema import ensure_schema


def add_cli(sub: Any) -> None:
    p = sub.add_parser("schema", help="create the keyspace and tables")
    s = p.add_subparsers(metavar="ACTION")
    a = s.add_parser("apply", help="create the keyspace and tables if missing (idempotent)")
    a.set_defaults(func=cmd_schema_apply)


def cmd_schema_apply(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    tables = ensure_schema(settings, backfill=backfill)
    print(f"schema applied: {', '.join(tables)}")
    return 0
