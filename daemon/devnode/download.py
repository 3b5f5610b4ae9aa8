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
import queue
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .errors import DevnodeError, JavaError
from .java import find_java
from .locks import locked

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

#: Pinned so the copy step behaves the same everywhere, whatever Maven's default is.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies"

_POM = Path(__file__).with_name("pom.xml")
_MARKER = ".complete"
_HEARTBEAT_S = 10.0
_MIN_JARS = 50  # cassandra-all 5.0 pulls ~100; far fewer means resolution went wrong

Progress = Callable[[str], object]


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
        raise DevnodeError(
            f"casque: {jar} is missing after the Maven download; delete {lib.parent} and retry"
        )
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


_DOWNLOADED = re.compile(r"Downloaded from \S+: (\S+) \(([^)]*)\)")
_COPYING = re.compile(r"Copying (\S+\.jar)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _maven_env() -> dict[str, str]:
    env = dict(os.environ)
    try:
        # Maven itself runs on any JDK, but use the one we run Cassandra with so a JAVA_HOME
        # pointing at an exotic JDK cannot break the download.
        env["JAVA_HOME"] = str(find_java().java_home)
    except JavaError:
        pass
    env["MAVEN_OPTS"] = env.get("MAVEN_OPTS", "")
    return env


def _run_maven(version: str, out_dir: Path, log_path: Path, progress: Progress) -> None:
    mvn = os.environ.get("CASQUE_MVN") or shutil.which("mvn")
    if not mvn:
        raise DevnodeError(
            "casque: Maven (mvn) is not on PATH; install it (apt-get install maven) -- it fetches "
            "Cassandra's jars from Maven Central once"
        )
    cmd = [
        mvn, "-B", "--strict-checksums", "-Dstyle.color=never",
        "-f", str(_POM),
        DEPENDENCY_PLUGIN,
        f"-Dcassandra.version={version}",
        f"-DoutputDirectory={out_dir}",
        "-DincludeScope=runtime",
    ]
    started = time.monotonic()
    jars_downloaded = 0
    files_downloaded = 0
    copied = 0
    last_lines: list[str] = []
    with log_path.open("w", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=_maven_env(), cwd=str(out_dir.parent),
        )
        assert proc.stdout is not None
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                lines.put(_ANSI.sub("", raw.decode("utf-8", "replace")).rstrip("\n"))
            lines.put(None)

        threading.Thread(target=pump, daemon=True, name="casque-maven-output").start()
        last_report = time.monotonic()
        try:
            while True:
                try:
                    line = lines.get(timeout=1.0)
                except queue.Empty:
                    line = ""
                now = time.monotonic()
                if line is None:
                    break
                if line:
                    log.write(line + "\n")
                    last_lines = (last_lines + [line])[-40:]
                    m = _DOWNLOADED.search(line)
                    if m:
                        files_downloaded += 1
                        if m.group(1).endswith(".jar"):
                            jars_downloaded += 1
                            progress(f"  [{jars_downloaded:3d}] {m.group(1).rsplit('/', 1)[-1]}"
                                     f" ({m.group(2).split(' at ')[0]})")
                            last_report = now
                    elif _COPYING.search(line):
                        copied += 1
                if now - last_report >= _HEARTBEAT_S:
                    progress(f"  ... {now - started:.0f}s, {files_downloaded} files downloaded, "
                             f"{copied} jars copied")
                    last_report = now
            rc = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    if rc != 0:
        errors = [ln for ln in last_lines if ln.startswith("[ERROR]") and ln.strip() != "[ERROR]"]
        reason = errors[0] if errors else (last_lines[-1] if last_lines else "no output")
        raise DevnodeError(
            f"casque: Maven failed (exit {rc}) fetching cassandra-all {version}: {reason[:300]}; "
            f"check network/proxy (~/.m2/settings.xml) and retry, full log: {log_path}"
        )
    progress(f"  {copied} jars in place after {time.monotonic() - started:.0f}s "
             f"({jars_downloaded} jars downloaded, Maven's own plugins included; "
             f"the others were already in ~/.m2)")


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
            progress(f"casque: note: no SHA-256 is pinned for {version}; recorded {digest} "
                     f"(Maven verified every jar's SHA-1)")
        progress(f"casque: Cassandra {version} ready: {len(jars)} jars, {size / 1e6:.0f} MB "
                 f"in {marker['seconds']}s")
        return target
