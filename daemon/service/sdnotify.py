"""sd_notify(3) without libsystemd: one datagram to $NOTIFY_SOCKET per state change.

READY=1 when serving, WATCHDOG=1 pings at half of $WATCHDOG_USEC, STATUS= for ``systemctl status``,
STOPPING=1 on shutdown. Outside systemd (no NOTIFY_SOCKET) every call is a no-op.
"""

from __future__ import annotations

import os
import socket


class Notifier:
    def __init__(self, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ) if env is None else env
        address = env.get("NOTIFY_SOCKET", "")
        self.address = "\0" + address[1:] if address.startswith("@") else address
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        mine = not pid or pid == str(os.getpid())
        self.watchdog_interval = int(usec) / 2_000_000 if usec.isdigit() and mine else None
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def notify(self, *lines: str) -> None:
        if not self.address:
            return
        if self._sock is None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self._sock.sendto("\n".join(lines).encode(), self.address)
        except OSError:
            pass  # systemd gone or socket unreachable: nothing useful to do

    def ready(self, status: str) -> None:
        self.notify("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def status(self, status: str) -> None:
        self.notify(f"STATUS={status}")

    def watchdog(self) -> None:
        self.notify("WATCHDOG=1")

    def stopping(self, status: str = "draining in-flight messages") -> None:
        self.notify("STOPPING=1", f"STATUS={status}")

    def reloading(self) -> None:
        self.notify("RELOADING=1")
