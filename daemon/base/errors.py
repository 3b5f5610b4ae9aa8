"""Exceptions that carry a one-line message naming the problem and the fix.

Every error a user can cause (bad config, bad payload, bad cron, Cassandra down) is raised as a
``CasqueError`` subclass, so the CLI can print ``casque: <message>`` and exit non-zero without a
traceback, and the daemon can log it and keep serving everything else.
"""

from __future__ import annotations


class CasqueError(Exception):
    """Base class: ``str(err)`` is one line that names the problem and the fix."""

    exit_code = 1


class UsageError(CasqueError):
    """Bad input on the command line or through the API (exit code 2, like argparse)."""

    exit_code = 2


class ConfigError(UsageError):
    """A config file or environment override is malformed."""


class PayloadError(UsageError):
    """A payload is not JSON-serialisable or is larger than the queue allows."""


class QueueNotFound(UsageError):
    """A queue name that was never created."""


class KeyConflict(CasqueError):
    """A send with on_conflict='error' found the lookup key in use."""

    exit_code = 3


class MessageNotFound(CasqueError):
    """No message with that id or key (exit code 4, so scripts can tell it apart)."""

    exit_code = 4


class StorageUnavailable(CasqueError):
    """Cassandra could not be reached or could not reach its consistency level."""

    exit_code = 5


class StorageRefused(StorageUnavailable):
    """Cassandra answered and refused the configuration: credentials it rejects, a keyspace that does not exist or
    predates this casque. Waiting cannot fix it, so a starting daemon or server exits with the line instead of
    retrying (a fixed password file or config is read by the restart)."""
