"""Every console route through the ASGI client (httpx), against the real Cassandra node.

The app is built on the suite's connected client; nothing is mocked. Each action is checked by
reading Cassandra afterwards, not by trusting the page.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import structlog.testing
from starlette.applications import Starlette

from daemon.base.config import ConsoleSettings
from daemon.base.errors import ConfigError
from daemon.engine.client import Casque
from daemon.engine.cluster.heartbeats import Heartbeat, Heartbeats
from daemon.engine.observe.samples import Counters, Samples, recent_rates, series
from daemon.http.app import CONSOLE_PATH, build_serve_app
from daemon.http.console import build_console
from daemon.testing.daemonproc import ROOT, start_daemon, until, wait_for, write_config

from .conftest import TEST_KEYSPACE

ADMIN, VIEWER = ("admin", "admin-pw"), ("viewer", "viewer-pw")


def console_app(cq: Casque, **overrides: object) -> Starlette:
    options: dict = {"admin_password": "admin-pw", "viewer_password": "viewer-pw"} | overrides
    return build_console(cq, ConsoleSettings(**options))


@pytest.fixture
async def admin(cq: Casque) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=console_app(cq)), base_url="http://console", auth=ADMIN
    ) as c:
        yield c


@pytest.fixture
async def viewer(cq: Casque) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=console_app(cq)), base_url="http://console", auth=VIEWER
    ) as c:
        yield c


def csrf(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert found, "the page carries no CSRF token"
    return found.group(1)


async def act(client: httpx.AsyncClient, page: str, action: str, data: dict[str, object]) -> httpx.Response:
    """Post a form the way a browser would: with the token read from the page it is on."""
    token = csrf(await client.get(page))
    return await client.post(action, data={"csrf": token, **data})


async def poison_one(cq: Casque, queue: str, task: str, payload: object) -> uuid.UUID:
    """Send, take and poison a message through the engine's own paths (as the dispatcher does)."""
    mid = await cq.send(queue, task, payload)
    consumer, taken = cq.consumer(queue), []
    for _ in range(50):  # a fetch takes from one row at a time; other messages may be due in other rows
        taken = [m for m in await consumer.fetch(50) if str(m.id) == mid]
        if taken:
            break
    assert taken, "the message was not taken"
    await cq.stores.acker.poison(
        taken[0],
        "handler raised ValueError on its last attempt",
        "ValueError",
        "bad input",
        'Traceback (most recent call last):\n  File "h.py", line 1\nValueError: bad input\n',
    )
    return uuid.UUID(mid)


async def test_without_credentials_nothing_is_shown(cq: Casque) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=console_app(cq)), base_url="http://console") as anon:
        r = await anon.get("/queues")
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic")
        assert (await anon.get("/queues", auth=("admin", "wrong"))).status_code == 401
        assert (await anon.get("/queues", headers={"Authorization": "Bearer admin-pw"})).status_code == 200
        assert (
            await anon.get("/static/htmx.min.js", headers={"Authorization": "Basic !!notbase64"})
        ).status_code == 401


def test_a_console_without_any_password_or_with_one_for_both_roles_is_refused(cq: Casque) -> None:
    with pytest.raises(ConfigError, match="console.admin_password"):
        build_console(cq, ConsoleSettings())
    with pytest.raises(ConfigError, match="are the same"):
        build_console(cq, ConsoleSettings(admin_password="same", viewer_password="same"))


async def test_queues_page_shows_counts_of_a_sent_message_and_creates_queues(
    cq: Casque, admin: httpx.AsyncClient, queue_name: str
) -> None:
    r = await act(
        admin, "/queues", "/queues", {"name": queue_name, "shards": "2", "timeout": "45s", "max_attempts": "3"}
    )
    assert r.status_code == 303 and r.headers["location"].startswith(f"/queues/{queue_name}?msg=")
    qs = await cq.stores.queues.get(queue_name, fresh=True)
    assert (qs.shards, qs.timeout_ms, qs.max_attempts) == (2, 45_000, 3)
    await cq.send(queue_name, "t", {"n": 1})
    await cq.send(queue_name, "t", {"n": 2}, delay="1h")
    page = await admin.get("/queues", params={"q": queue_name})
    row = re.search(rf'<tr data-queue="{queue_name}">(.*?)</tr>', page.text, re.S)
    assert row, page.text
    assert '<td class="n waiting">1</td>' in row.group(1) and '<td class="n scheduled">1</td>' in row.group(1)


async def test_large_queues_show_their_daemons_depth_sample_on_the_list(
    cq: Casque, admin: httpx.AsyncClient, queue_name: str
) -> None:
    sampled, unsampled = f"{queue_name}_s", f"{queue_name}_u"
    for name in (sampled, unsampled):
        await cq.create_queue(name, shards=16, buckets=24)  # 384 shard rows: too many to count on the list
        await cq.send(name, "t", 1)
    await Samples(cq.db, TEST_KEYSPACE).write(
        sampled, cq.clock.now_ms() - 10_000, "h:1", Counters(), 0, 0, 0, (7, 3, 1)
    )
    # searched by whole name: one point read finds it first, however many queues the keyspace holds
    page = await admin.get("/queues", params={"q": sampled})
    found = re.search(rf'<tr data-queue="{sampled}">(.*?)</tr>', page.text, re.S)
    assert found is not None
    row = found.group(1)
    assert re.findall(r">~(\d+)</td>", row) == ["7", "3", "1"] and "counted it 10" in row
    page = await admin.get("/queues", params={"q": unsampled})
    found = re.search(rf'<tr data-queue="{unsampled}">(.*?)</tr>', page.text, re.S)
    assert found is not None
    row = found.group(1)
    assert re.findall(r'class="n (?:waiting|scheduled|in-flight)"[^>]*>([^<]*)<', row) == ["-", "-", "-"]
    exact = await admin.get(f"/queues/{unsampled}")  # its own page counts exactly
    assert '<b class="waiting">1</b>' in exact.text


async def test_queue_list_pages_by_token_and_never_repeats(cq: Casque, admin: httpx.AsyncClient) -> None:
    prefix = f"pg{uuid.uuid4().hex[:6]}"
    names = {f"{prefix}_{i}" for i in range(7)}
    for n in names:
        await cq.create_queue(n)
    app = console_app(cq, page_size=3)
    seen: list[str] = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console", auth=ADMIN) as c:
        url = f"/queues?q={prefix}"
        for _ in range(10):
            page = await c.get(url)
            seen += re.findall(r'<tr data-queue="([^"]+)">', page.text)
            nxt = re.search(r'class="next" href="([^"]+)"', page.text)
            if not nxt:
                break
            url = nxt.group(1).replace("&amp;", "&")
    assert sorted(seen) == sorted(names)  # every queue once, across pages of at most 3


async def test_queue_page_peeks_without_consuming(cq: Casque, admin: httpx.AsyncClient, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    mid = await cq.send(
        queue_name, "peeked.task", {"visible": "yes-please", "html": "<script>alert(1)</script>"}, key="k1"
    )
    for _ in range(2):
        page = await admin.get(f"/queues/{queue_name}")
        assert page.status_code == 200 and mid in page.text and "yes-please" in page.text
        assert "<script>alert(1)" not in page.text  # payloads are data, escaped
    assert [str(m.id) for m in await cq.peek(queue_name)] == [mid]  # still there: peeking took nothing
    detail = await admin.get(f"/queues/{queue_name}/messages/{mid}")
    assert "peeked.task" in detail.text and "yes-please" in detail.text and "k1" in detail.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in detail.text


async def test_message_page_shows_history_for_queues_that_keep_it(
    cq: Casque, admin: httpx.AsyncClient, queue_name: str
) -> None:
    await cq.create_queue(queue_name, history=True)
    mid = await cq.send(queue_name, "t", 1)
    page = await admin.get(f"/queues/{queue_name}/messages/{mid}")
    assert "No history rows yet" in page.text
    assert (await admin.get(f"/queues/{queue_name}/messages/{uuid.uuid4()}")).status_code == 404
    bad = await admin.get(f"/queues/{queue_name}/messages/not-an-id")
    assert bad.status_code == 400 and "not-an-id" in bad.text


async def test_send_and_cancel_from_the_console(cq: Casque, admin: httpx.AsyncClient, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    page = f"/queues/{queue_name}"
    r = await act(
        admin, page, f"{page}/send", {"task": "console.test", "payload": '{"to": "ada"}', "delay": "", "key": "kk"}
    )
    assert r.status_code == 303 and "msg=sent" in r.headers["location"]
    m = await cq.get(queue_name, key="kk")
    assert m is not None and m.payload == {"to": "ada"} and m.task == "console.test"
    bad = await act(admin, page, f"{page}/send", {"task": "t", "payload": "{not json"})
    assert "err=" in bad.headers["location"] and "JSON" in (await admin.get(bad.headers["location"])).text
    r = await act(admin, f"{page}/messages/{m.id}", f"{page}/messages/{m.id}/cancel", {})
    assert r.status_code == 303 and await cq.peek(queue_name) == []


async def test_purge_needs_the_queue_name_typed(cq: Casque, admin: httpx.AsyncClient, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    for i in range(5):
        await cq.send(queue_name, "t", i)
    page = f"/queues/{queue_name}"
    r = await act(admin, page, f"{page}/purge", {"confirm": "yes"})
    assert "err=" in r.headers["location"] and len(await cq.peek(queue_name)) == 5
    with structlog.testing.capture_logs() as logs:
        r = await act(admin, page, f"{page}/purge", {"confirm": queue_name})
    assert "purged%205%20messages" in r.headers["location"] and await cq.peek(queue_name) == []
    done = [e for e in logs if e["event"] == "console_action"]
    assert [(e["action"], e["user"], e["queue"], e["deleted"]) for e in done] == [("purge", "admin", queue_name, 5)]


async def test_poison_pages_replay_one_by_task_or_all_and_purge(
    cq: Casque, admin: httpx.AsyncClient, queue_name: str
) -> None:
    await cq.create_queue(queue_name)
    a = await poison_one(cq, queue_name, "task.a", {"n": 1})
    b = await poison_one(cq, queue_name, "task.b", {"n": 2})
    c = await poison_one(cq, queue_name, "task.b", {"n": 3})
    d = await poison_one(cq, queue_name, "task.c", {"n": 4})
    page = f"/queues/{queue_name}/poison"
    listing = await admin.get(page)
    assert all(str(x) in listing.text for x in (a, b, c, d)) and "handler raised ValueError" in listing.text
    detail = await admin.get(f"{page}/{a}")
    assert "ValueError: bad input" in detail.text and "Traceback" in detail.text
    r = await act(admin, page, f"{page}/replay", {"what": "selected", "id": str(a)})
    assert "replayed%201" in r.headers["location"]
    assert {p.id for p in await cq.stores.poison.list(queue_name)} == {b, c, d}
    assert [m.payload for m in await cq.peek(queue_name)] == [{"n": 1}]
    await act(admin, page, f"{page}/replay", {"what": "task", "task": "task.b"})
    assert {p.id for p in await cq.stores.poison.list(queue_name)} == {d}
    refused = await act(admin, page, f"{page}/purge", {"confirm": "nope"})
    assert "err=" in refused.headers["location"] and await cq.stores.poison.count(queue_name) == 1
    await act(admin, page, f"{page}/replay", {"what": "all"})
    assert await cq.stores.poison.count(queue_name) == 0 and len(await cq.peek(queue_name)) == 4
    await poison_one(cq, queue_name, "task.e", None)
    await act(admin, page, f"{page}/purge", {"confirm": queue_name})
    assert await cq.stores.poison.count(queue_name) == 0


async def test_schedules_page_lists_and_cancels(cq: Casque, admin: httpx.AsyncClient, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "digest", {"u": 1}, cron="0 9 * * *", tz="Europe/Berlin", key="digest:1")
    page = f"/queues/{queue_name}/schedules"
    listing = await admin.get(page)
    assert "digest:1" in listing.text and "cron &#39;0 9 * * *&#39; Europe/Berlin" in listing.text
    r = await act(admin, page, f"{page}/cancel", {"key": "digest:1"})
    assert "msg=cancelled" in r.headers["location"]
    assert await cq.get_key(queue_name, "digest:1") is None and await cq.peek(queue_name) == []


async def test_viewer_sees_everything_and_can_do_nothing(
    cq: Casque, viewer: httpx.AsyncClient, queue_name: str
) -> None:
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", 1)
    page = await viewer.get(f"/queues/{queue_name}")
    assert (
        page.status_code == 200
        and "read-only" in page.text
        and "Purge" not in page.text
        and 'name="csrf"' not in page.text
    )
    for path in (
        f"/queues/{queue_name}/purge",
        f"/queues/{queue_name}/send",
        "/queues",
        f"/queues/{queue_name}/poison/replay",
    ):
        r = await viewer.post(path, data={"confirm": queue_name, "task": "t", "name": "x", "what": "all"})
        assert r.status_code == 403 and "read-only" in r.text
    assert len(await cq.peek(queue_name)) == 1


async def test_actions_need_the_csrf_token_and_the_same_origin(
    cq: Casque, admin: httpx.AsyncClient, queue_name: str
) -> None:
    await cq.create_queue(queue_name)
    await cq.send(queue_name, "t", 1)
    target = f"/queues/{queue_name}/purge"
    assert (await admin.post(target, data={"confirm": queue_name})).status_code == 403
    assert (await admin.post(target, data={"confirm": queue_name, "csrf": "0" * 64})).status_code == 403
    token = csrf(await admin.get(f"/queues/{queue_name}"))
    evil = await admin.post(
        target, data={"confirm": queue_name, "csrf": token}, headers={"Origin": "http://evil.example"}
    )
    assert evil.status_code == 403 and "cross-site" in evil.text
    cross = await admin.post(
        target, data={"confirm": queue_name, "csrf": token}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert cross.status_code == 403
    assert len(await cq.peek(queue_name)) == 1
    ok = await admin.post(
        target, data={"confirm": queue_name}, headers={"X-CSRF-Token": token, "Origin": "http://console"}
    )
    assert ok.status_code == 303 and await cq.peek(queue_name) == []


async def test_bad_input_gets_one_line_and_the_protocol_status(
    cq: Casque, admin: httpx.AsyncClient, queue_name: str
) -> None:
    missing = await admin.get(f"/queues/{queue_name}")
    assert missing.status_code == 404 and f"queue &#39;{queue_name}&#39; does not exist" in missing.text
    assert (await admin.get("/queues", params={"after": "abc"})).status_code == 400
    await cq.create_queue(queue_name)
    too_many = await admin.get(f"/queues/{queue_name}", params={"n": "100000"})
    assert too_many.status_code == 400 and "from 1 to 200" in too_many.text
    r = await act(admin, "/queues", "/queues", {"name": "9 bad name"})
    assert "err=" in r.headers["location"] and "invalid queue name" in (await admin.get(r.headers["location"])).text
    assert (await admin.get("/queues")).status_code == 200  # and it keeps serving


async def test_links_carry_the_root_path_behind_a_proxy(cq: Casque, queue_name: str) -> None:
    await cq.create_queue(queue_name)
    transport = httpx.ASGITransport(app=console_app(cq), root_path="/casque")
    async with httpx.AsyncClient(transport=transport, base_url="http://console", auth=ADMIN) as c:
        page = await c.get(f"/casque/queues/{queue_name}")
        assert page.status_code == 200
        assert (
            'src="/casque/static/htmx.min.js"' in page.text
            and f'href="/casque/queues/{queue_name}/poison"' in page.text
        )
        assert (await c.get("/casque/static/console.css")).status_code == 200
        r = await c.post(f"/casque/queues/{queue_name}/purge", data={"csrf": csrf(page), "confirm": queue_name})
        assert r.headers["location"].startswith(f"/casque/queues/{queue_name}?")


async def test_chart_draws_depth_and_rates_from_the_stats_rows(
    cq: Casque, admin: httpx.AsyncClient, queue_name: str
) -> None:
    await cq.create_queue(queue_name)
    samples, now = Samples(cq.db, TEST_KEYSPACE), cq.clock.now_ms()
    # one daemon, 3 minutes: depth 100 -> 80 -> 50 while it acks 30 then 40 (so 10 then 10 were sent)
    for i, (acked, depth) in enumerate([(0, 100), (30, 80), (70, 50)]):
        await samples.write(queue_name, now - (2 - i) * 60_000, "h:1", Counters(acked=acked), 0, 0, 0, (depth, 0, 0))
    rows = await samples.read(queue_name, now - 3_600_000)
    points = [p for p in series(rows, now) if p.waiting is not None]
    assert [p.waiting for p in points] == [100, 80, 50]
    assert [round(p.acked_per_s, 3) for p in points[1:]] == [0.5, round(40 / 60, 3)]
    assert [round(p.sent_per_s or 0, 3) for p in points[1:]] == [round(10 / 60, 3), round(10 / 60, 3)]
    assert recent_rates(rows, now) == (round(20 / 120, 1), round(70 / 120, 1))
    svg = await admin.get(f"/queues/{queue_name}/chart.svg")
    assert svg.headers["content-type"].startswith("image/svg+xml") and svg.text.count("<polyline") >= 2


async def test_daemons_page_shows_a_running_daemons_heartbeat(
    cq: Casque, admin: httpx.AsyncClient, queue_name: str, tmp_path: Path
) -> None:
    await cq.create_queue(queue_name)
    for i in range(3):
        await cq.send(queue_name, "test.record", i, delay="1h")
    cfg = write_config(tmp_path / "c.toml", TEST_KEYSPACE, [queue_name], consumers=3)
    d = start_daemon(cfg, tmp_path / "rec", tmp_path / "log")
    beats = Heartbeats(cq.db, TEST_KEYSPACE)
    try:
        await until(lambda: _beating(beats, d.proc.pid), 60, "a heartbeat row", d)

        # a stats row soon carries the queue's depth, counted from the shard rows (the daemon's
        # first count starts at once; a row is written every 10 s)
        async def depths() -> list[tuple[int, int, int]]:
            rows = await Samples(cq.db, TEST_KEYSPACE).read(queue_name, 0)
            return [
                (r.depth_waiting, r.depth_scheduled, r.depth_in_flight) for r in rows if r.depth_waiting is not None
            ]

        await until(depths, 60, "a stats row with the depth", d)
        assert await depths() == [(0, 3, 0)]
        page = await admin.get("/daemons")
        row = re.search(rf"<td class=\"n\">{d.proc.pid}</td>.*?</tr>", page.text, re.S)
        assert (
            row
            and queue_name in row.group(0)
            and '<td class="n">3</td>' in row.group(0)
            and "(stale)" not in row.group(0)
        )
    finally:
        d.signal(signal.SIGTERM)
        d.wait()


async def _beating(beats: Heartbeats, pid: int) -> Heartbeat | None:
    return next((h for h in await beats.list() if h.pid == pid), None)


def test_casque_web_makes_a_password_when_none_is_set_and_listens_on_loopback(settings: object, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[cassandra]\nkeyspace = "{TEST_KEYSPACE}"\n[log]\nformat = "json"\n')
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASQUE_CONSOLE__")} | {"PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli", "-c", str(cfg), "web", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None  # stderr=PIPE
    try:
        line = proc.stderr.readline()
        found = re.search(r"log in as admin / (\S+)", line)
        assert found, line
        url = f"http://127.0.0.1:{port}/queues"
        wait_for(lambda: _status(url, ("admin", found.group(1))) == 200, 60, "the console to answer")
        assert _status(url, None) == 401 and _status(url, ("admin", "guess")) == 401
        served = re.search(r'"url": "http://([^:]+):', proc.stderr.readline())
        assert served and served.group(1) == "127.0.0.1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_casque_web_rejects_a_bad_root_path_in_one_line(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "web", "--root-path", "casque/"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ) | {"PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "must start with '/'" in r.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(url: str, auth: tuple[str, str] | None) -> int:
    headers = {"Authorization": "Basic " + base64.b64encode(":".join(auth).encode()).decode()} if auth else {}
    try:
        return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2).status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def test_templates_and_static_files_ship_in_the_package() -> None:
    import tomllib
    from fnmatch import fnmatch

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["daemon"]
    files = [f for f in (ROOT / "daemon/http/console").rglob("*") if f.is_file() and f.suffix not in (".py", ".pyc")]
    assert files
    for f in files:
        rel = f.relative_to(ROOT / "daemon").as_posix()
        assert any(fnmatch(rel, g) for g in globs), f"{rel} is not package data in pyproject.toml"


async def test_a_silent_daemon_is_shown_as_stale(cq: Casque, admin: httpx.AsyncClient) -> None:
    name = f"gone-{uuid.uuid4().hex[:8]}"
    now = cq.clock.now_ms()
    await Heartbeats(cq.db, TEST_KEYSPACE).beat(
        Heartbeat(f"{name}:1", name, 1, ["q"], 4, 2, now - 600_000, now - 60_000, "0.1.0")
    )
    page = await admin.get("/daemons")
    row = re.search(rf'<tr class="(\w+)">\s*<td>{name}</td>.*?</tr>', page.text, re.S)
    assert row and row.group(1) == "stale" and "1m ago <b>(stale)</b>" in row.group(0)


SECURITY_HEADERS = {
    "content-security-policy": "frame-ancestors 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


def framing_headers(r: httpx.Response) -> dict[str, str | None]:
    return {name: r.headers.get(name) for name in SECURITY_HEADERS}


async def test_every_kind_of_console_response_forbids_framing_and_sniffing(
    cq: Casque, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages, htmx fragments, static files, redirects, refusals, error pages and even an unhandled
    error's 500, from the console alone (``casque web``) and mounted beside SQS (``casque serve``);
    the SQS answers on the same port stay as they were."""
    await cq.create_queue(queue_name)
    mid = await cq.send(queue_name, "t", {"n": 1})
    serve = build_serve_app(
        cq, cq.settings.sqs, ConsoleSettings(admin_password="admin-pw", viewer_password="viewer-pw")
    )
    page = f"/queues/{queue_name}"
    for app, root in ((console_app(cq), ""), (serve, CONSOLE_PATH)):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://console", auth=ADMIN) as c:
            form = await c.get(root + page)
            responses = {
                "page": form,
                "message page": await c.get(f"{root}{page}/messages/{mid}"),
                "htmx fragment": await c.get(root + page, headers={"HX-Request": "true"}),
                "chart": await c.get(f"{root}{page}/chart.svg"),
                "static js": await c.get(f"{root}/static/htmx.min.js"),
                "static css": await c.get(f"{root}/static/console.css"),
                "missing static": await c.get(f"{root}/static/nothing.js"),
                "error page": await c.get(f"{root}/queues/no_such_{queue_name}"),
                "bad input": await c.get(root + page, params={"n": "100000"}),
                "no route": await c.get(f"{root}/nowhere"),
                "slash redirect": await c.get(f"{root}/queues/"),
                "action redirect": await c.post(f"{root}{page}/purge", data={"csrf": csrf(form), "confirm": "no"}),
                "csrf refusal": await c.post(f"{root}{page}/purge", data={"confirm": queue_name}),
                "login": await c.get(root + page, auth=("admin", "wrong")),
            }
            monkeypatch.setattr(cq.observe, "daemons", _raise_bug)
            responses["unhandled error"] = await c.get(f"{root}/daemons")
            monkeypatch.undo()
        statuses = {kind: r.status_code for kind, r in responses.items()}
        assert statuses == {
            "page": 200,
            "message page": 200,
            "htmx fragment": 200,
            "chart": 200,
            "static js": 200,
            "static css": 200,
            "missing static": 404,
            "error page": 404,
            "bad input": 400,
            "no route": 404,
            "slash redirect": 307,
            "action redirect": 303,
            "csrf refusal": 403,
            "login": 401,
            "unhandled error": 500,
        }, root
        wrong = {kind: framing_headers(r) for kind, r in responses.items() if framing_headers(r) != SECURITY_HEADERS}
        assert wrong == {}, root
    assert len(await cq.peek(queue_name)) == 1  # the purge was refused both times
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=serve), base_url="http://sqs") as c:
        bare = await c.get(CONSOLE_PATH)  # the console's root without its slash: the console's, not SQS's
        sqs = await c.post("/", data={"Action": "ListQueues", "QueueNamePrefix": queue_name})
    assert (bare.status_code, bare.headers.get("location")) == (307, CONSOLE_PATH + "/")
    assert framing_headers(bare) == SECURITY_HEADERS
    assert sqs.status_code == 200 and f"/{queue_name}</QueueUrl>" in sqs.text
    assert framing_headers(sqs) == dict.fromkeys(SECURITY_HEADERS)


async def _raise_bug() -> None:
    raise RuntimeError("a bug the console did not expect")
