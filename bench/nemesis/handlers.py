"""The nemesis daemons' handlers (``handler_modules = ["bench.nemesis.handlers"]``): ``nemesis.step`` records its
start and its end in $CASQUE_TEST_RECORD (the tests' record format: "task id attempt pid time extra"), so the
checker sees every handler start and end; the tests' ``test.tick`` (cron firings) and ``test.always_fail`` (poisoned
after 3 attempts) come with the import."""

from __future__ import annotations

import asyncio
from typing import Any

import daemon.testing.handlers  # noqa: F401  (registers test.tick and test.always_fail)
from daemon import Context, Handler, register
from daemon.testing.handlers import record


def label(payload: Any) -> str:
    """What the ledger knows a send by: kind:n:version."""
    return f"{payload.get('g', '-')}:{payload.get('n', -1)}:{payload.get('v', 0)}"


@register("nemesis.step")
class Step(Handler):
    async def handle(self, ctx: Context, payload: Any) -> None:
        record(ctx, f"start {label(payload)}")
        await asyncio.sleep(0.02)  # a little work, so a kill can fall between start and end
        record(ctx, f"end {label(payload)}")


@register("nemesis.tick")
class Tick(Handler):
    """A cron firing: its schedule's key, occurrence number and fire time (s)."""

    async def handle(self, ctx: Context, payload: Any) -> None:
        fire = ctx.fire_time.timestamp() if ctx.fire_time else 0.0
        record(ctx, f"tick {ctx.key} {ctx.occurrence} {fire:.3f}")
