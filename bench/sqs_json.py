"""A minimal SQS client (AWS JSON 1.0 over aiohttp) for load that thousands of tasks generate.

aiobotocore builds and signs every request in Python (milliseconds each); bench.many_queues runs
thousands of long-polling users and producers in one process on a 2-core machine, so it speaks
the wire protocol directly: one POST per action, ``X-Amz-Target: AmazonSQS.<Action>``, against a
``casque serve`` with ``sqs.auth = none`` on loopback. Every queue the client addresses is added to
``touched`` (the bench plots the server's memory against it).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

ACCOUNT = "000000000000"


class ServerGone(Exception):
    """The server did not answer (killed, restarting, overloaded): the call may be retried."""


class SqsError(Exception):
    """The server answered with an SQS error (a client mistake: not retried)."""


class SqsJson:
    def __init__(self, base_url: str, connections: int, timeout_s: float) -> None:
        self.base_url = base_url
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections), timeout=aiohttp.ClientTimeout(total=timeout_s)
        )
        self.touched: set[str] = set()

    def url(self, queue: str) -> str:
        return f"{self.base_url}/{ACCOUNT}/{queue}"

    async def call(self, action: str, queue: str, **params: Any) -> dict[str, Any]:
        self.touched.add(queue)
        body = json.dumps({"QueueUrl": self.url(queue), **params})
        headers = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{action}"}
        try:
            async with self.session.post(self.base_url + "/", data=body, headers=headers) as r:
                text = await r.text()
                status = r.status
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
            raise ServerGone(f"{action}: {type(exc).__name__}: {exc}") from None
        if status >= 500:
            raise ServerGone(f"{action}: HTTP {status}: {text[:200]}")
        out: dict[str, Any] = json.loads(text) if text else {}
        if status != 200:
            raise SqsError(f"{action} on {queue}: HTTP {status}: {out.get('__type')}: {out.get('message')}")
        return out

    async def close(self) -> None:
        await self.session.close()
