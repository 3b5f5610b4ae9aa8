"""Make the console screenshots in docs/console/ from a real workload (nothing here is drawn by hand).

    .venv/bin/python docs/console/screenshots.py [--minutes 5]

Needs the local node (`casque cassandra start`) and /usr/bin/chromium. In the keyspace
``casque_shots`` it creates a few queues, runs a real daemon with the example handlers and a
producer for a few minutes (so the daemon writes its depth samples and counters), serves
``casque web``, and photographs each page with headless Chromium.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from daemon.base.config import Settings  # noqa: E402
from daemon.engine.client import Casque  # noqa: E402
from daemon.engine.send.producer import Job  # noqa: E402
from daemon.engine.storage.schema import ensure_schema  # noqa: E402

KEYSPACE, OUT, PASSWORD = "casque_shots", Path(__file__).resolve().parent, "shots"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def produce(cq: Casque, seconds: float) -> None:
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        minute = int((seconds - (end - time.monotonic())) // 60)
        burst = 20 + 25 * (minute % 3)
        await cq.send_many(
            "emails",
            [
                Job("demo.greet", {"name": f"user{n + i}"}, delay=random.choice([None, None, "90s", "3m"]))
                for i in range(burst)
            ],
        )
        await cq.send_many(
            "thumbnails", [Job("demo.resize", {"image": f"img{n + i}.png", "seconds": 0.4}) for i in range(6)]
        )
        await cq.send("webhooks", "casque.http", {"url": "https://example.org/hook", "n": n})
        if n % 100 == 0:
            await cq.send("emails", "demo.doomed", {"to": f"bounce{n}@example.org"})
        n += burst
        await asyncio.sleep(5)


async def main(minutes: float) -> None:
    s = Settings()
    s.cassandra.keyspace = KEYSPACE
    s.queue_defaults.shards, s.queue_defaults.buckets = 4, 6
    ensure_schema(s)
    cq = await Casque.connect(s)
    for name in ("emails", "thumbnails", "reports", "webhooks"):
        await cq.create_queue(name, if_missing=True)
    await cq.send(
        "reports",
        "demo.report",
        {"user": 42},
        cron="0 9 * * *",
        tz="Europe/Berlin",
        key="digest:42",
        on_conflict="replace",
    )
    await cq.send("reports", "demo.report", {"team": "ops"}, every="15m", key="ops-summary", on_conflict="replace")
    await cq.send(
        "emails",
        "demo.greet",
        {"name": "Ada", "to": "ada@example.org", "template": "welcome"},
        delay="1h",
        priority=5,
        key="welcome:ada",
        headers={"trace_id": "4bf92f3577b34da6", "sent_by": "signup-service"},
        on_conflict="replace",
    )
    cfg = OUT / ".shots.toml"
    cfg.write_text(
        f'[cassandra]\nkeyspace = "{KEYSPACE}"\n[queue_defaults]\nshards = 4\nbuckets = 6\n'
        '[worker]\nqueues = ["emails", "thumbnails", "reports"]\nconsumers = 2\nhandler_modules = '
        '["handlers.examples"]\n'
        '[log]\nlevel = "warning"\n'
    )
    env = dict(os.environ) | {"PYTHONPATH": str(ROOT), "CASQUE_CONSOLE__ADMIN_PASSWORD": PASSWORD}
    daemon = subprocess.Popen([sys.executable, "-m", "daemon.cli", "-c", str(cfg), "run"], cwd=ROOT, env=env)
    port = _port()
    web = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli", "-c", str(cfg), "web", "--port", str(port)], cwd=ROOT, env=env
    )
    try:
        await produce(cq, minutes * 60)
        await shoot(cq, f"http://127.0.0.1:{port}")
    finally:
        for p in (daemon, web):
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=60)
        cfg.unlink()
        await cq.close()


async def shoot(cq: Casque, url: str) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        ctx = await browser.new_context(
            http_credentials={"username": "admin", "password": PASSWORD}, viewport={"width": 1280, "height": 800}
        )
        page = await ctx.new_page()
        poisoned = await cq.poison.list("emails", 1)
        welcome = await cq.get("emails", key="welcome:ada")
        pages = {
            "queues": "/queues",
            "queue": "/queues/emails",
            "poison": "/queues/emails/poison",
            "schedules": "/queues/reports/schedules",
            "daemons": "/daemons",
        }
        if welcome:
            pages["message"] = f"/queues/emails/messages/{welcome.id}"
        if poisoned:
            pages["poisoned"] = f"/queues/emails/poison/{poisoned[0].id}"
        for name, path in pages.items():
            await page.goto(url + path)
            await page.wait_for_load_state("networkidle")
            await page.screenshot(path=str(OUT / f"{name}.png"), full_page=True)
            print(f"docs/console/{name}.png")
        await browser.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=5)
    asyncio.run(main(ap.parse_args().minutes))
