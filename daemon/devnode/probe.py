"""Is a node answering CQL?

"Process alive" is not "ready": a JVM spends 10-40 s replaying commit logs, opening
system tables and joining the ring before it opens the native port. Ready means
``SELECT release_version FROM system.local`` returns a row through the real driver, the
same path the application uses.

The probe first tries a plain TCP connect (microseconds, and it keeps the driver from
logging a warning per refused connection while the node boots), then runs the query with
a short-lived driver ``Cluster`` pinned to that single host.

It follows the node's ``extra_yaml``: with ``client_encryption_options.enabled`` (and not
``optional``) it uses TLS without certificate verification (it only asks "is it up"), and
with an ``authenticator`` other than AllowAll it logs in as Cassandra's default superuser
``cassandra``/``cassandra``. A refused login still proves the server answers, so it
counts as ready (reported as release_version "?").
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from typing import Any

__all__ = ["tcp_open", "cql_ready", "release_version"]


def tcp_open(address: str, port: int, timeout: float = 1.0) -> bool:
    """True if something accepts TCP connections on ``address:port``."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def _tls_wanted(extra_yaml: Mapping[str, Any]) -> bool:
    opts = extra_yaml.get("client_encryption_options")
    return isinstance(opts, Mapping) and bool(opts.get("enabled")) and not opts.get("optional")


def _auth_wanted(extra_yaml: Mapping[str, Any]) -> bool:
    auth = extra_yaml.get("authenticator")
    if isinstance(auth, Mapping):
        auth = auth.get("class_name")
    return bool(auth) and "AllowAll" not in str(auth)


def release_version(
    address: str, port: int, *, extra_yaml: Mapping[str, Any] | None = None, timeout: float = 5.0
) -> str | None:
    """``release_version`` reported by the node, or None if it does not answer CQL.

    Returns ``"?"`` when the node answers but refuses our login (auth is on and the default
    superuser's password was changed): the server is up, we just cannot query it.
    """
    if not tcp_open(address, port, timeout=min(timeout, 1.0)):
        return None
    # Imported lazily: the driver is heavy and only needed once a port is open.
    from cassandra import AuthenticationFailed
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable
    from cassandra.policies import WhiteListRoundRobinPolicy

    extra_yaml = extra_yaml or {}
    ssl_context = None
    if _tls_wanted(extra_yaml):
        ssl_context = ssl.create_default_context()
        ssl_context.check_hostname = False
        ssl_context.verify_mode = ssl.CERT_NONE
    profile = ExecutionProfile(
        load_balancing_policy=WhiteListRoundRobinPolicy([address]),
        request_timeout=timeout,
    )
    cluster = Cluster(
        contact_points=[address],
        port=port,
        # Cassandra 5.0 speaks v5 natively; pinning it skips two logged downgrade round-trips.
        protocol_version=5,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connect_timeout=timeout,
        control_connection_timeout=timeout,
        auth_provider=(PlainTextAuthProvider("cassandra", "cassandra") if _auth_wanted(extra_yaml) else None),
        ssl_context=ssl_context,
        # Nodes in a cluster that is still forming: don't wait for schema agreement.
        max_schema_agreement_wait=0,
    )
    try:
        session = cluster.connect()
        row = session.execute("SELECT release_version FROM system.local", timeout=timeout).one()
        return str(row[0]) if row is not None else None
    except NoHostAvailable as exc:
        if any(isinstance(e, AuthenticationFailed) for e in exc.errors.values()):
            return "?"
        return None
    except AuthenticationFailed:
        return "?"
    except Exception:  # noqa: BLE001 - any driver error means "not ready yet"
        return None
    finally:
        cluster.shutdown()


def cql_ready(address: str, port: int, *, extra_yaml: Mapping[str, Any] | None = None, timeout: float = 5.0) -> bool:
    """True if the node at ``address:port`` answers CQL (see module docstring)."""
    return release_version(address, port, extra_yaml=extra_yaml, timeout=timeout) is not None
