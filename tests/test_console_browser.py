"""The console's main flows in a real browser: Debian's chromium driven by Playwright, against a
real ``casque web`` process on the suite's Cassandra node.

Skipped (with the reason) only where /usr/bin/chromium is missing: ``make setup`` installs it when
run as root and prints the one-line fix otherwise. Every test also fails on any console error or
uncaught exception in the page. With ``CASQUE_SCREENSHOTS=DIR`` the tests save a screenshot of
each page into DIR (docs/console/ holds the ones the README shows).
"""

from __future__ import annotations

import base64
import functools
import http.server
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from daemon.engine.client import Casque
from daemon.testing.daemonproc import ROOT

from .conftest import TEST_KEYSPACE
from .test_console import poison_one

if TYPE_CHECKING:  # typing only: without playwright the module is skipped (importorskip below)
    from playwright.async_api import Browser
    from playwright.async_api import Page as Tab

CHROMIUM = "/usr/bin/chromium"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason=f"{CHROMIUM} is missing: install it with 'apt-get install -y chromium' (make setup does, as root)",
    ),
]
playwright_api = pytest.importorskip("playwright.async_api", reason="playwright is missing: pip install -e '.[test]'")

ADMIN_PW, VIEWER_PW = "browser-admin-pw", "browser-viewer-pw"
REFRESH_S = 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(url: str) -> bool:
    auth = base64.b64encode(f"admin:{ADMIN_PW}".encode()).decode()
    try:
        return (
            urllib.request.urlopen(
                urllib.request.Request(url, headers={"Authorization": f"Basic {auth}"}), timeout=2
            ).status
            == 200
        )
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="module")
def console_url(tmp_path_factory: pytest.TempPathFactory, settings: object) -> Iterator[str]:
    """``casque web`` as a real process, configured through the environment as an operator would."""
    tmp = tmp_path_factory.mktemp("web")
    cfg = tmp / "c.toml"
    cfg.write_text(f'[cassandra]\nkeyspace = "{TEST_KEYSPACE}"\n[log]\nformat = "json"\n')
    port = _free_port()
    env = dict(os.environ) | {
        "PYTHONPATH": str(ROOT),
        "CASQUE_CONSOLE__ADMIN_PASSWORD": ADMIN_PW,
        "CASQUE_CONSOLE__VIEWER_PASSWORD": VIEWER_PW,
        "CASQUE_CONSOLE__REFRESH": f"{REFRESH_S}s",
    }
    with open(tmp / "web.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "daemon.cli", "-c", str(cfg), "web", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while not _answers(f"{url}/queues"):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"casque web did not come up:\n{(tmp / 'web.log').read_text()[-3000:]}")
            time.sleep(0.1)
        yield url
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def other_site(tmp_path_factory: pytest.TempPathFactory, console_url: str) -> Iterator[str]:
    """Another origin (127.0.0.1, another port) whose page puts the console in a frame, beside a
    frame of its own page (which shows: frames do render here)."""
    folder = tmp_path_factory.mktemp("other-site")
    (folder / "own.html").write_text(
        '<!doctype html><link rel="icon" href="data:,"><p id=own>a page of the other site</p>'
    )
    (folder / "frames.html").write_text(
        '<!doctype html><link rel="icon" href="data:,"><title>another site</title><h1>another site</h1>'
        f'<iframe id="console" src="{console_url}/queues" width="900" height="500"></iframe>'
        '<iframe id="own" src="own.html" width="300" height="100"></iframe>'
    )

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with playwright_api.async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        await b.close()


class Page:
    """A logged-in tab that records every console error and uncaught exception."""

    def __init__(self, page: Tab, url: str) -> None:
        self.page, self.url = page, url
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))

    async def open(self, path: str) -> None:
        await self.page.goto(self.url + path)

    async def shot(self, name: str) -> None:
        folder = os.environ.get("CASQUE_SCREENSHOTS")
        if folder:
            await self.page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


async def _logged_in(browser: Browser, url: str, user: str, password: str) -> AsyncIterator[Page]:
    ctx = await browser.new_context(
        http_credentials={"username": user, "password": password}, viewport={"width": 1280, "height": 900}
    )
    page = Page(await ctx.new_page(), url)
    yield page
    await ctx.close()
    assert page.errors == [], page.errors  # no console errors, no uncaught exceptions


@pytest.fixture
async def admin_page(browser: Browser, console_url: str) -> AsyncIterator[Page]:
    async for page in _logged_in(browser, console_url, "admin", ADMIN_PW):
        yield page


@pytest.fixture
async def viewer_page(browser: Browser, console_url: str) -> AsyncIterator[Page]:
    async for page in _logged_in(browser, console_url, "viewer", VIEWER_PW):
        yield page


async def test_a_message_sent_from_the_console_appears_in_the_counts_and_peek_shows_its_payload(
    cq: Casque, admin_page: Page, queue_name: str
) -> None:
    await cq.create_queue(queue_name)
    p, page = admin_page, admin_page.page
    await p.open(f"/queues/{queue_name}")
    await page.fill("input[name=task]", "emails.send")
    await page.fill("textarea[name=payload]", '{"to": "ada@example.org"}')
    await page.click("form[action$='/send'] button")
    await page.wait_for_selector(".flash.ok")
    assert await page.inner_text(".counts .waiting") == "1"
    assert "ada@example.org" in await page.inner_text("table.peek")
    assert len(await cq.peek(queue_name)) == 1  # the page peeked; nothing was taken
    # live refresh: a message sent elsewhere shows up without reloading the page
    await cq.send(queue_name, "emails.send", {"to": "grace@example.org"})
    await page.wait_for_function("document.querySelector('.counts .waiting').textContent === '2'", timeout=15_000)
    assert "grace@example.org" in await page.inner_text("table.peek")
    await p.shot("queue")
    await p.open(f"/queues?q={queue_name}")
    assert await page.inner_text(f"tr[data-queue={queue_name}] td.waiting") == "2"
    await page.click(f"tr[data-queue={queue_name}] a")
    await page.click("table.peek a.mono >> nth=0")
    assert "ada@example.org" in await page.inner_text("pre.payload")
    await p.shot("message")


async def test_live_refresh_pauses_while_the_tab_is_hidden(cq: Casque, admin_page: Page, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    p, page = admin_page, admin_page.page
    refreshes: list[float] = []
    page.on("request", lambda r: refreshes.append(time.monotonic()) if r.headers.get("hx-request") else None)
    await p.open(f"/queues/{queue_name}")
    deadline = time.monotonic() + 15
    while len(refreshes) < 2 and time.monotonic() < deadline:
        await page.wait_for_timeout(100)
    assert len(refreshes) >= 2, "the page did not refresh itself while visible"
    await page.evaluate("Object.defineProperty(document, 'hidden', {configurable: true, get: () => true})")
    hidden_at = time.monotonic()
    await page.wait_for_timeout(4 * REFRESH_S * 1000)  # a negative result needs a window: four refresh periods
    assert [t for t in refreshes if t > hidden_at + 0.5] == [], "it kept refreshing while hidden"
    before = len(refreshes)
    await page.evaluate(
        "Object.defineProperty(document, 'hidden', {configurable: true, get: () => false});"
        "document.dispatchEvent(new Event('visibilitychange'))"
    )
    deadline = time.monotonic() + 10
    while len(refreshes) == before and time.monotonic() < deadline:
        await page.wait_for_timeout(50)
    assert len(refreshes) > before, "it did not resume when the tab became visible"


async def test_replaying_a_poisoned_message_moves_it_back(cq: Casque, admin_page: Page, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    kept = await poison_one(cq, queue_name, "reports.build", {"report": 7})
    chosen = await poison_one(cq, queue_name, "reports.build", {"report": 8})
    p, page = admin_page, admin_page.page
    await p.open(f"/queues/{queue_name}/poison")
    await p.shot("poison")
    await page.click(f"a[href$='/poison/{chosen}']")
    assert "ValueError: bad input" in await page.inner_text("pre.traceback")
    await p.shot("poisoned")
    await page.go_back()
    await page.check(f"input[value='{chosen}']")
    await page.click("button[value=selected]")
    await page.wait_for_selector(".flash.ok")
    assert "replayed 1" in await page.inner_text(".flash.ok")
    assert [r.id for r in await cq.stores.poison.list(queue_name)] == [kept]
    assert [m.payload for m in await cq.peek(queue_name)] == [{"report": 8}]


async def test_purge_demands_the_queue_name(cq: Casque, admin_page: Page, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    for i in range(3):
        await cq.send(queue_name, "t", i)
    p, page = admin_page, admin_page.page
    await p.open(f"/queues/{queue_name}")
    await page.click("details.danger summary")
    await page.click("form[action$='/purge'] button")  # nothing typed
    await page.wait_for_selector(".flash.err")
    assert "type the queue's name" in await page.inner_text(".flash.err")
    assert len(await cq.peek(queue_name)) == 3
    await page.click("details.danger summary")
    await page.fill("input[name=confirm]", queue_name)
    await page.click("form[action$='/purge'] button")
    await page.wait_for_selector(".flash.ok")
    assert await cq.peek(queue_name) == []
    assert await page.inner_text(".counts .waiting") == "0"


async def test_a_read_only_user_sees_but_cannot_act(cq: Casque, viewer_page: Page, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", {"x": 1})
    await poison_one(cq, queue_name, "t", {"x": 2})
    p, page = viewer_page, viewer_page.page
    await p.open(f"/queues/{queue_name}")
    assert "read-only" in await page.inner_text("header")
    assert await page.locator("form[method=post]").count() == 0
    await p.open(f"/queues/{queue_name}/poison")
    assert await page.locator("button").count() == 0 and await page.locator("input[type=checkbox]").count() == 0
    status = await page.evaluate(
        f"fetch('/queues/{queue_name}/purge', {{method: 'POST', body: new "
        f"URLSearchParams({{confirm: '{queue_name}'}})}})"
        ".then(r => r.status)"
    )
    assert status == 403
    assert p.errors[-1:] == [
        "console error: Failed to load resource: the server responded with a status of 403 (Forbidden)"
    ]
    p.errors.pop()  # the refusal this test asked for, logged by the browser
    assert len(await cq.peek(queue_name)) == 1 and await cq.stores.poison.count(queue_name) == 1


async def test_queues_schedules_and_daemons_pages_render(cq: Casque, admin_page: Page, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "digest", {"user": 42}, cron="0 9 * * *", tz="Europe/Berlin", key="digest:42")
    p, page = admin_page, admin_page.page
    await p.open(f"/queues/{queue_name}/schedules")
    assert "Europe/Berlin" in await page.inner_text("table.schedules")
    await p.shot("schedules")
    await p.open("/daemons")
    assert await page.locator("table.daemons").count() == 1
    await p.shot("daemons")
    await p.open(f"/queues?q={uuid.uuid4().hex}")
    assert "no queue" in await page.inner_text("table.queues")


async def test_a_fifo_queue_page_shows_its_groups_live(cq: Casque, admin_page: Page, queue_name: str) -> None:
    name = queue_name + ".fifo"
    await cq.create_queue(name, fifo=True)
    p, page = admin_page, admin_page.page
    await p.open(f"/queues/{name}")
    assert "no group has a message" in await page.inner_text("table.groups")
    for dedup in ("o-1", "o-2"):  # sent from the page's form, with a group and a dedup id
        await page.fill("input[name=task]", "orders.ship")
        await page.fill("input[name=group]", "customer-7")
        await page.fill("input[name=dedup_id]", dedup)
        await page.click("form[action$='/send'] button")
        await page.wait_for_selector(".flash.ok")
        assert "sequence" in await page.inner_text(".flash.ok")
    assert await page.inner_text("table.groups tbody tr td.n >> nth=1") == "2"  # waiting
    # live refresh: a receive elsewhere puts the group's first message in flight
    [got] = await cq.receive(name, max=1, wait=0, visibility=300)
    assert got.message.group == "customer-7"
    await page.wait_for_function(
        "document.querySelector('table.groups tbody tr td.n').textContent === '1'", timeout=15_000
    )
    assert await page.inner_text("table.groups tbody tr td.n >> nth=1") == "1"
    assert [m.group for m in await cq.peek(name)] == ["customer-7", "customer-7"]  # the page only read
    await p.shot("fifo-queue")


async def test_another_site_cannot_show_the_console_in_a_frame(admin_page: Page, other_site: str) -> None:
    """Clickjacking: the browser is logged in (it would answer the console's login by itself), yet a
    frame of the console on another site's page stays empty (the headers are in console/headers.py)."""
    p, page = admin_page, admin_page.page
    console_answers: list[int] = []
    page.on("response", lambda r: console_answers.append(r.status) if r.url == p.url + "/queues" else None)
    await page.goto(f"{other_site}/frames.html")
    own_element = await page.wait_for_selector("iframe#own")
    assert own_element is not None  # None only when waiting for "hidden" or "detached"
    own = await own_element.content_frame()
    assert own is not None and await own.inner_text("#own") == "a page of the other site"
    deadline = time.monotonic() + 15
    while not console_answers and time.monotonic() < deadline:
        await page.wait_for_timeout(50)
    assert console_answers == [200], "the console was not even asked: the test proves nothing"
    framed_element = await page.query_selector("iframe#console")
    assert framed_element is not None
    framed = await framed_element.content_frame()
    assert framed is not None
    await page.wait_for_timeout(500)  # let the frame settle on whatever it shows
    shown = await framed.content()
    assert framed.url.startswith("chrome-error://"), framed.url
    assert "casque" not in shown and "Queues" not in shown, shown[:500]
    refusals = [e for e in p.errors if "frame-ancestors 'none'" in e]
    assert refusals, p.errors
    p.errors[:] = [e for e in p.errors if e not in refusals]  # the refusal this test asked for, logged by the browser
