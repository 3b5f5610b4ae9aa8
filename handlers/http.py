"""``casque.http``: call a URL (opt-in: list ``handlers.http`` in ``worker.handler_modules``).

Payload: ``{"url": "https://...", "method": "POST", "json": {...}, "headers": {...}, "timeout": 10}``.
Only http and https URLs are accepted. A 5xx or a network error raises (so the message is retried
with backoff); a 4xx other than 408/429 poisons the message, because sending the same request again
would fail the same way. Anyone who can send to a served queue can make the daemon request any URL
it can reach (internal ones included): enable it only for queues whose producers you trust.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from daemon import Context, Handler, Poison, register


@register("casque.http", timeout=30)
class HttpCallback(Handler):
    """A sync handler (urllib blocks), so it runs in the daemon's bounded thread pool."""

    def handle(self, ctx: Context, payload: Any) -> None:
        if not isinstance(payload, dict) or not isinstance(payload.get("url"), str):
            raise Poison('casque.http needs a payload like {"url": "https://example.org/hook", "json": {...}}')
        url = payload["url"]
        if not url.startswith(("http://", "https://")):
            raise Poison(f"casque.http only calls http(s) URLs, got {url[:60]!r}")
        body = json.dumps(payload["json"]).encode() if "json" in payload else None
        headers = {"Content-Type": "application/json", "User-Agent": "casque", **payload.get("headers", {})}
        request = urllib.request.Request(
            url, data=body, method=payload.get("method", "POST" if body else "GET"), headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=float(payload.get("timeout", 10))) as response:
                ctx.log.info("http_callback_done", url=url, status=response.status)
        except urllib.error.HTTPError as exc:
            if 400 <= exc.code < 500 and exc.code not in (408, 429):
                raise Poison(f"{url} answered {exc.code} {exc.reason}: the request itself is wrong") from None
            raise
