"""When a pulled message was received: the first receive and the latest, kept with the message.

A pull (engine/delivery/receive.py) writes the message's in-flight state anyway, so the times ride
along in one small header, ``casque.received = "<first ms>,<latest ms>"``: no extra write, no
extra read. SQS needs both: ApproximateFirstReceiveTimestamp is the first (on every later receive
too), and a visibility change may not reach past 12 h from the latest receive.
"""

from __future__ import annotations

RECEIVED_HEADER = "casque.received"


def stamp(headers: dict[str, str], now_ms: int) -> None:
    """Record a receive at ``now_ms`` (the first one is kept)."""
    first, _ = times(headers)
    headers[RECEIVED_HEADER] = f"{first or now_ms},{now_ms}"


def times(headers: dict[str, str]) -> tuple[int | None, int | None]:
    """(first receive, latest receive) in ms, or None for a message never pulled."""
    raw = headers.get(RECEIVED_HEADER, "")
    first, _, last = raw.partition(",")
    try:
        return int(first), int(last or first)
    except ValueError:
        return None, None
