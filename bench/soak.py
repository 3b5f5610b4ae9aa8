"""The reliability soak: the fault scenarios of tests/test_reliability.py at full size.

    python -m bench.soak [--messages 100000] [--kills 20]

Runs against the local dev node (keyspace casque_bench), prints one line per scenario and a table,
and exits non-zero if anything was lost. Its figures go in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daemon.engine.client import Casque  # noqa: E402
from daemon.base.config import Settings  # noqa: E402
from daemon.engine.db import Database  # noqa: E402
from daemon.devnode import ClusterSpec, start  # noqa: E402
from daemon.engine.schema import apply_schema  # noqa: E402
from tests.support.chaos import Outcome, kill_chaos, race  # noqa: E402

KEYSPACE = "casque_bench"


async def main(messages: int, kills: int) -> int:
    settings = Settings()
    settings.cassandra.keyspace = KEYSPACE
    db = Database(settings.cassandra).connect()
    try:
        apply_schema(db, KEYSPACE, settings.schema)
    finally:
        db.close()
    cq = await Casque.connect(settings)
    stamp = int(time.time())
    results: list[tuple[str, Outcome]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, run in [
                (f"kill -9 x{kills}, 3 daemons", lambda d: kill_chaos(cq, f"soak_kill_{stamp}", d, KEYSPACE, messages, kills)),
                ("4 daemons x 8 consumers, 2 shards", lambda d: race(cq, f"soak_race_{stamp}", d, KEYSPACE, messages, [0, 0, 0, 0], 8, 2)),
                ("clocks +2 s / -2 s / 0", lambda d: race(cq, f"soak_skew_{stamp}", d, KEYSPACE, messages, [2000, -2000, 0], 4, 4)),
            ]:
                workdir = Path(tmp) / name.split()[0].strip("-")
                workdir.mkdir(exist_ok=True)
                print(f"running: {name} ({messages} messages)...", flush=True)
                out = await run(workdir)
                print(f"  {out.line()}", flush=True)
                results.append((name, out))
    finally:
        await cq.close()
    print(f"\n{'scenario':<38} {'sent':>8} {'lost':>6} {'dup':>6} {'same attempt twice':>19} {'s':>7}")
    for name, o in results:
        print(f"{name:<38} {o.sent:>8} {o.lost:>6} {o.duplicated:>6} {o.same_attempt_twice:>19} {o.seconds:>7.1f}")
    # Duplicates are expected only where daemons were killed mid-run (their timeouts expired);
    # the races run with a 10-minute timeout, so any duplicate there is a violation.
    return 1 if any(o.lost or o.same_attempt_twice or (o.kills == 0 and o.duplicated) for _, o in results) else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--kills", type=int, default=20)
    args = ap.parse_args()
    start(ClusterSpec())
    sys.exit(asyncio.run(main(args.messages, args.kills)))
