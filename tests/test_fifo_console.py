"""The console's page of a FIFO queue shows its message groups (in flight, waiting per group), read
with a bound (engine/observe/fifo_groups.py) and without consuming anything. Real node, the console's ASGI app."""

from __future__ import annotations

import html
import re

import httpx

from daemon.engine.client import Casque
from daemon.engine.observe.fifo_groups import fifo_groups

from .test_console import admin  # noqa: F401  (the fixture)


def group_rows(page: str) -> dict[str, tuple[str, str]]:
    """The groups table as {group: (in flight, waiting)}, as the page shows them."""
    table = page.split('<table class="groups">', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r'<tr><td class="mono">(.*?)</td><td class="n">(.*?)</td><td class="n">(.*?)</td></tr>', table)
    return {html.unescape(g): (a, b) for g, a, b in rows}


async def _fill(cq: Casque, name: str) -> None:
    """g1: 3 messages, its first received (in flight); g<2>: 2 waiting."""
    await cq.create_queue(name, fifo=True)
    for n in range(3):
        await cq.send(name, "t", n, group="g1", dedup_id=f"g1-{n}")
    for n in range(2):
        await cq.send(name, "t", n, group="g<2>", dedup_id=f"g2-{n}")
    [got] = await cq.receive(name, max=1, wait=0, visibility=300)
    assert (got.message.group, got.message.payload) == ("g1", 0)


async def test_fifo_queue_page_shows_each_groups_in_flight_and_waiting(
    cq: Casque,
    admin: httpx.AsyncClient,  # noqa: F811 (the fixture imported above)
    queue_name: str,
) -> None:
    name = queue_name + ".fifo"
    await _fill(cq, name)
    before = [(str(m.id), m.state, m.attempt) for m in await cq.peek(name, 10)]
    for _ in range(2):
        page = await admin.get(f"/queues/{name}")
        assert page.status_code == 200, page.text
        assert group_rows(page.text) == {"g1": ("1", "2"), "g<2>": ("0", "2")}
        assert "g&lt;2&gt;" in page.text and "g<2>" not in page.text  # a group name is data, escaped
        assert "FIFO" in page.text and "per queue" in page.text
    assert [
        (str(m.id), m.state, m.attempt) for m in await cq.peek(name, 10)
    ] == before  # reading the groups took nothing
    standard = queue_name + "_std"
    await cq.create_queue(standard)
    assert '<table class="groups">' not in (await admin.get(f"/queues/{standard}")).text


async def test_fifo_groups_read_is_bounded_and_says_at_least(
    cq: Casque,
    admin: httpx.AsyncClient,  # noqa: F811 (the fixture imported above)
    queue_name: str,
) -> None:
    name = queue_name + ".fifo"
    await _fill(cq, name)
    qs = await cq.stores.queues.get(name)
    full = await fifo_groups(cq.db, cq.stores.table, qs, cq.clock.now_ms())
    assert not full.truncated and full.read == 5
    cut = await fifo_groups(cq.db, cq.stores.table, qs, cq.clock.now_ms(), limit=2)
    assert cut.truncated and cut.read == 2  # the row's two oldest: g1's in flight one and its next
    assert [(g.group, g.in_flight, g.waiting, g.at_least) for g in cut.groups] == [("g1", 1, 1, True)]


async def test_fifo_send_form_needs_a_group_and_says_the_sequence(
    cq: Casque,
    admin: httpx.AsyncClient,  # noqa: F811 (the fixture imported above)
    queue_name: str,
) -> None:
    name = queue_name + ".fifo"
    await cq.create_queue(name, fifo=True)
    page = await admin.get(f"/queues/{name}")
    assert (
        'name="group" required' in page.text and 'name="delay"' not in page.text
    )  # FIFO refuses per-message delays and keys
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text).group(1)  # type: ignore[union-attr]
    form = {"csrf": token, "task": "t", "payload": "{}"}
    refused = await admin.post(f"/queues/{name}/send", data=form | {"dedup_id": "d1"})
    assert "err=" in refused.headers["location"] and "group" in refused.headers["location"]
    assert await cq.peek(name) == []  # refused: nothing sent
    sent = await admin.post(f"/queues/{name}/send", data=form | {"group": "g", "dedup_id": "d1"})
    again = await admin.post(f"/queues/{name}/send", data=form | {"group": "g", "dedup_id": "d1"})
    assert "sequence" in sent.headers["location"] and "duplicate" in again.headers["location"]
    assert [(m.group, m.dedup_id) for m in await cq.peek(name)] == [("g", "d1")]
