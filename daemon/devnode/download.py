"""Fetch the Cassandra server jars (once) into a per-user cache.

Apache publishes the Cassandra 5.0 *binary tarball* only on its own download mirrors,
not on Maven Central; Central does carry ``org.apache.cassandra:cassandra-all`` and its
whole dependency tree, which is everything ``CassandraDaemon`` needs on the classpath.
So we let Maven resolve that tree (``pom.xml`` next to this file) and copy the runtime
jars into ``${XDG_CACHE_HOME:-~/.cache}/casque/cassandra-<version>/lib``.

Integrity: ``mvn --strict-checksums`` fails if any jar does not match the SHA-1 that
Central publishes next to it, and we additionally compare cassandra-all's jar against a
SHA-256 pinned in this file, so a compromised mirror or a local repository poisoned with
a different build is refused.

Atomicity: jars land in ``lib.partial`` and a ``.complete`` marker is written only after
verification, then the directory is renamed to ``lib``. An interrupted download (Ctrl-C,
network drop) leaves no marker and is redone from scratch on the next call.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from .errors import DevnodeError
from .locks import locked
from .maven import DEPENDENCY_PLUGIN, MavenFailed, MavenMissing, Progress, copy_dependencies

__all__ = [
    "PINNED",
    "KNOWN_SHA256",
    "DEPENDENCY_PLUGIN",
    "cache_root",
    "cassandra_dir",
    "is_installed",
    "ensure_cassandra",
]

#: The Cassandra release casque develops and tests against.
PINNED = "5.0.6"

#: SHA-256 of ``cassandra-all-<version>.jar`` as published on Maven Central.
KNOWN_SHA256: dict[str, str] = {
    "5.0.6": "bd533204e1088179ba58bd817082673b211cc78f605e64e34c3cd001c42aca2a",
}


_POM = Path(__file__).with_name("pom.xml")
_MARKER = ".complete"
_MIN_JARS = 50  # cassandra-all 5.0 pulls ~100; far fewer means resolution went wrong


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/casque`` (default ``~/.cache/casque``): outside any repository."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "casque"


def cassandra_dir(version: str = PINNED) -> Path:
    """Where the jars of ``version`` live (``<dir>/lib/*.jar``) once installed."""
    return cache_root() / f"cassandra-{version}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _main_jar(lib: Path, version: str) -> Path:
    return lib / f"cassandra-all-{version}.jar"


def _verify(lib: Path, version: str) -> str:
    """Check the jar set in ``lib``; return cassandra-all's SHA-256 or raise."""
    jar = _main_jar(lib, version)
    if not jar.is_file():
        raise DevnodeError(f"casque: {jar} is missing after the Maven download; delete {lib.parent} and retry")
    digest = _sha256(jar)
    expected = KNOWN_SHA256.get(version)
    if expected is not None and digest != expected:
        raise DevnodeError(
            f"casque: {jar.name} has SHA-256 {digest} but {expected} is pinned: the download is "
            f"corrupt or tampered; delete ~/.m2/repository/org/apache/cassandra/cassandra-all/"
            f"{version} and {lib.parent}, then retry"
        )
    count = len(list(lib.glob("*.jar")))
    if count < _MIN_JARS:
        raise DevnodeError(
            f"casque: only {count} jars were fetched for Cassandra {version} (expected ~100); "
            f"delete {lib.parent} and retry, see {lib.parent / 'maven.log'}"
        )
    return digest


def is_installed(version: str = PINNED) -> bool:
    """True if a complete, verified download of ``version`` is in the cache."""
    d = cassandra_dir(version)
    return (d / _MARKER).is_file() and _main_jar(d / "lib", version).is_file()


def _run_maven(version: str, out_dir: Path, log_path: Path, progress: Progress) -> None:
    """Fetch cassandra-all ``version`` and its runtime jars into ``out_dir`` (the shared fetcher, maven.py)."""
    try:
        fetched = copy_dependencies(
            _POM, out_dir, log_path, progress, options=[f"-Dcassandra.version={version}"], cwd=out_dir.parent
        )
    except MavenMissing:
        raise DevnodeError(
            "casque: Maven (mvn) is not on PATH; install it (apt-get install maven) -- it fetches "
            "Cassandra's jars from Maven Central once"
        ) from None
    except MavenFailed as exc:
        raise DevnodeError(
            f"casque: Maven failed (exit {exc.rc}) fetching cassandra-all {version}: {exc.reason}; "
            f"check network/proxy (~/.m2/settings.xml) and retry, full log: {log_path}"
        ) from None
    progress(
        f"  {fetched.copied} jars in place after {fetched.seconds:.0f}s "
        f"({fetched.jars_downloaded} jars downloaded, Maven's own plugins included; "
        f"the others were already in ~/.m2)"
    )


def ensure_cassandra(version: str = PINNED, progress: Progress = print) -> Path:
    """Return the directory holding ``lib/*.jar`` for ``version``, downloading it if needed.

    Cheap when already installed (a marker check plus one SHA-256 of a ~9 MB jar).
    Raises :class:`DevnodeError` if Maven is missing, the download fails or a checksum
    does not match.
    """
    target = cassandra_dir(version)
    lib = target / "lib"
    if is_installed(version):
        _verify(lib, version)
        return target
    with locked(target):  # parallel callers wait for one download
        if is_installed(version):  # another process finished it while we waited
            _verify(lib, version)
            return target
        partial = target / "lib.partial"
        for stale in (partial, lib):
            shutil.rmtree(stale, ignore_errors=True)
        (target / _MARKER).unlink(missing_ok=True)
        partial.mkdir(parents=True)
        progress(
            f"casque: fetching Cassandra {version} (cassandra-all + ~100 runtime jars, ~70 MB) "
            f"from Maven Central into {target}; this happens once"
        )
        started = time.monotonic()
        try:
            _run_maven(version, partial, target / "maven.log", progress)
            digest = _verify(partial, version)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        partial.rename(lib)
        jars = sorted(lib.glob("*.jar"))
        size = sum(j.stat().st_size for j in jars)
        marker = {
            "version": version,
            "cassandra_all_sha256": digest,
            "pinned": version in KNOWN_SHA256,
            "jars": len(jars),
            "bytes": size,
            "seconds": round(time.monotonic() - started, 1),
            "completed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        tmp = target / (_MARKER + ".tmp")
        tmp.write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        tmp.rename(target / _MARKER)
        if version not in KNOWN_SHA256:
            progress(
                f"casque: note: no SHA-256 is pinned for {version}; recorded {digest} "
                f"(Maven verified every jar's SHA-1)"
            )
        progress(f"casque: Cassandra {version} ready: {len(jars)} jars, {size / 1e6:.0f} MB in {marker['seconds']}s")
        return target
