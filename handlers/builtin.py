"""Built-in handlers: ``casque.echo`` logs its payload.

The HTTP callback handler lives in ``handlers.http`` and is opt-in (add it to
``worker.handler_modules``): it lets whoever can send to a queue make the daemon request a URL.
"""

from __future__ import annotations

from typing import Any

from daemon import Context, Handler, register


@register("casque.echo")
class Echo(Handler):
    async def handle(self, ctx: Context, payload: Any) -> None:
        ctx.log.info("echo", payload=payload)
