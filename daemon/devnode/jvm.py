"""Build the ``java`` command lines for a node (CassandraDaemon) and for nodetool.

This replaces Cassandra's bin/cassandra + cassandra-env.sh, which are not part of the
Maven artifacts we run from. Static flags come from the ``*.options`` files shipped next
to this module (curated from Cassandra 5.0's conf/jvm*-server.options); the dynamic ones
(heap, per-node JMX port, config and log locations) are added here.
"""

from __future__ import annotations

import os
from pathlib import Path

from .java import JavaInfo
from .spec import NodeLayout

__all__ = [
    "DAEMON_CLASS",
    "NODETOOL_CLASS",
    "read_options",
    "static_options",
    "classpath",
    "server_command",
    "server_env",
    "nodetool_command",
]

DAEMON_CLASS = "org.apache.cassandra.service.CassandraDaemon"
NODETOOL_CLASS = "org.apache.cassandra.tools.NodeTool"

_HERE = Path(__file__).parent


def read_options(path: Path) -> list[str]:
    """Flags from an options file: one per line, lines not starting with '-' are comments."""
    flags: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("-"):
            flags.append(line)
    return flags


def static_options(java_major: int) -> list[str]:
    """Common flags plus the Java-version-specific JPMS/GC flags, as separate argv items."""
    flags = read_options(_HERE / "jvm-server.options")
    flags += read_options(_HERE / ("jvm17.options" if java_major >= 17 else "jvm11.options"))
    argv: list[str] = []
    for flag in flags:
        # "--add-opens a/b=ALL-UNNAMED" is two argv items for the java launcher.
        argv.extend(flag.split(None, 1) if flag.startswith("--") else [flag])
    return argv


def classpath(cassandra_home: Path, conf_dir: Path | None = None) -> str:
    """conf dir first (Cassandra looks up some resources on the classpath), then lib/*."""
    parts = [str(conf_dir)] if conf_dir is not None else []
    parts.append(str(cassandra_home / "lib" / "*"))  # the java launcher expands the wildcard
    return os.pathsep.join(parts)


def _jamm_agent(cassandra_home: Path) -> list[str]:
    # Cassandra measures object sizes (memtables, caches) with jamm; without the agent it
    # falls back to slower, less accurate estimates and logs warnings.
    jars = sorted((cassandra_home / "lib").glob("jamm-*.jar"))
    return [f"-javaagent:{jars[-1]}"] if jars else []


def ring_delay_ms(nodes: int) -> int:
    """Cassandra's RING_DELAY (default 30 s, sized for real networks).

    On loopback it mostly bounds the startup gossip "shadow round" of a restarting seed,
    which waits for peers that we have not started yet. Overridable with CASQUE_RING_DELAY_MS.
    """
    env = os.environ.get("CASQUE_RING_DELAY_MS")
    if env:
        return int(env)
    return 1000


def superuser_setup_delay_ms(nodes: int) -> int:
    """Delay before Cassandra creates its default superuser (and between retries).

    0 on a single node, so PasswordAuthenticator works right after start. Not 0 with
    several nodes: the role manager retries *with the same delay* while some peers are
    still down, and a 0 ms retry loop spins a core and writes ~30,000 log lines/second.
    """
    return 0 if nodes == 1 else 1000


def server_command(java: JavaInfo, cassandra_home: Path, node: NodeLayout) -> list[str]:
    """argv that runs ``node`` in the foreground of its own (detached) process."""
    spec = node.spec
    return [
        str(java.java),
        f"-Xms{spec.heap}",
        f"-Xmx{spec.heap}",
        *static_options(java.major),
        f"-Xlog:gc=info:file={node.log_dir / 'gc.log'}:time,uptime,level:filecount=3,filesize=10485760",
        *_jamm_agent(cassandra_home),
        # Local-only JMX (bound to 127.0.0.1, no auth), one port per node, for nodetool.
        f"-Dcassandra.jmx.local.port={node.jmx_port}",
        "-Dcom.sun.management.jmxremote.authenticate=false",
        f"-Dcassandra.config={node.yaml_path.resolve().as_uri()}",
        f"-Dcassandra.logdir={node.log_dir}",
        f"-Dcassandra.storagedir={node.data_dir}",
        f"-Dcassandra.triggers_dir={node.conf_dir / 'triggers'}",
        f"-Dlogback.configurationFile={node.logback_path.resolve().as_uri()}",
        # Development-speed knobs: a loopback ring settles instantly.
        "-Dcassandra.skip_wait_for_gossip_to_settle=0",
        f"-Dcassandra.ring_delay_ms={ring_delay_ms(spec.nodes)}",
        f"-Dcassandra.superuser_setup_delay_ms={superuser_setup_delay_ms(spec.nodes)}",
        # Skip measuring the per-row memtable overhead at startup (1-4 s of CPU on a small
        # box); 180 bytes is what Cassandra 5.0 measures on 64-bit HotSpot.
        "-Dcassandra.memtable.row_overhead_size=180",
        # Marks the process so `status` can tell it is ours (see process.py).
        f"-Dcasque.node={spec.name}/{node.name}",
        "-cp",
        classpath(cassandra_home, node.conf_dir),
        DAEMON_CLASS,
    ]


def server_env(java: JavaInfo) -> dict[str, str]:
    """Environment for a node: the chosen JDK as JAVA_HOME, glibc arenas capped like
    cassandra-env.sh does."""
    env = dict(os.environ)
    env["JAVA_HOME"] = str(java.java_home)
    env.setdefault("MALLOC_ARENA_MAX", "4")
    # JAVA_TOOL_OPTIONS/_JAVA_OPTIONS from the user's shell would silently change the JVM.
    env.pop("JAVA_TOOL_OPTIONS", None)
    env.pop("_JAVA_OPTIONS", None)
    return env


def _jpms_only(argv: list[str]) -> list[str]:
    """Keep only the --add-exports/--add-opens pairs from a static option argv."""
    out: list[str] = []
    for i, item in enumerate(argv):
        if item in ("--add-exports", "--add-opens") and i + 1 < len(argv):
            out += [item, argv[i + 1]]
    return out


def nodetool_command(java: JavaInfo, cassandra_home: Path, jmx_port: int, args: list[str]) -> list[str]:
    """argv for ``nodetool -h 127.0.0.1 -p <jmx_port> <args...>`` without bin/nodetool."""
    # Same JPMS exports/opens as the server (JMX/RMI internals), none of its GC/heap flags.
    jpms = _jpms_only(static_options(java.major))
    return [
        str(java.java),
        "-Xmx256M",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",  # a short-lived client: start fast, don't optimise
        *jpms,
        f"-Dlogback.configurationFile={(_HERE / 'logback-tools.xml').resolve().as_uri()}",
        "-Dcassandra.storagedir=/tmp",
        "-cp",
        classpath(cassandra_home),
        NODETOOL_CLASS,
        "-h",
        "127.0.0.1",
        "-p",
        str(jmx_port),
        *args,
    ]
