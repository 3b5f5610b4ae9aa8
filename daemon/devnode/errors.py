"""Exceptions raised by the development-node launcher.

Every failure a developer can hit while starting a local Cassandra (wrong Java, a busy
port, a node that died) is reported as a :class:`DevnodeError` whose message is a
single line naming the problem *and* the fix. The CLI prints that line and exits 1, so
nobody has to read a traceback to learn that they should install openjdk-17.
"""

from __future__ import annotations

__all__ = ["DevnodeError", "JavaError", "PortInUseError", "NodeStartError"]

_PREFIX = "casque: "


class DevnodeError(Exception):
    """Base class: a one-line, actionable message (prefixed with ``casque:``)."""

    def __init__(self, message: str) -> None:
        # One line only: newlines from quoted log lines would break the contract.
        message = " ".join(message.split("\n")).strip()
        if not message.startswith(_PREFIX):
            message = _PREFIX + message
        super().__init__(message)

    @property
    def message(self) -> str:
        return str(self)


class JavaError(DevnodeError):
    """No usable JDK (Cassandra 5.0 runs only on Java 11 or 17)."""


class PortInUseError(DevnodeError):
    """A port a node needs is held by another process."""

    def __init__(self, message: str, *, address: str, port: int) -> None:
        super().__init__(message)
        self.address = address
        self.port = port


class NodeStartError(DevnodeError):
    """A node process exited or did not answer CQL in time."""
