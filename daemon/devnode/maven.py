"""The one Maven fetcher: ``mvn dependency:copy-dependencies`` of a POM into a directory, with Maven's
output streamed to a log file and each downloaded jar reported as it arrives.

It is how a jar set is fetched (daemon/devnode/jar_set.py: the dev node's Cassandra and the pipeline's
Spark Cassandra connector). Maven does the resolution and ``--strict-checksums`` makes it refuse a jar
whose SHA-1 differs from the one Central publishes; the jar set pins and checks the main jar's SHA-256
on top.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from .errors import DevnodeError, JavaError
from .java import find_java

#: Pinned so the copy step behaves the same everywhere, whatever Maven's default is.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies"
HEARTBEAT_S = 10.0

Progress = Callable[[str], object]

_DOWNLOADED = re.compile(r"Downloaded from \S+: (\S+) \(([^)]*)\)")
_COPYING = re.compile(r"Copying (\S+\.jar)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class MavenMissing(DevnodeError):
    """``mvn`` is not on PATH (nor named by CASQUE_MVN): the caller says what it wanted it for."""


class MavenFailed(DevnodeError):
    """Maven exited non-zero; ``reason`` is its first [ERROR] line (or its last line)."""

    def __init__(self, rc: int, reason: str, log_path: Path) -> None:
        super().__init__(f"Maven failed (exit {rc}): {reason}; full log: {log_path}")
        self.rc, self.reason, self.log_path = rc, reason, log_path


@dataclass
class Fetched:
    """What one run did: jars and files Maven downloaded (the rest came from ~/.m2), jars it copied."""

    jars_downloaded: int = 0
    files_downloaded: int = 0
    copied: int = 0
    seconds: float = 0.0


def mvn() -> str:
    """The Maven executable (CASQUE_MVN overrides PATH, for tests and odd installs)."""
    found = os.environ.get("CASQUE_MVN") or shutil.which("mvn")
    if not found:
        raise MavenMissing("Maven (mvn) is not on PATH")
    return found


def maven_env() -> dict[str, str]:
    """Maven itself runs on any JDK, but use the one casque runs Cassandra with so a JAVA_HOME pointing at
    an exotic JDK cannot break the download."""
    env = dict(os.environ)
    try:
        env["JAVA_HOME"] = str(find_java().java_home)
    except JavaError:
        pass
    env["MAVEN_OPTS"] = env.get("MAVEN_OPTS", "")
    return env


def copy_dependencies(
    pom: Path, out_dir: Path, log_path: Path, progress: Progress, options: Sequence[str] = (), cwd: Path | None = None
) -> Fetched:
    """Copy ``pom``'s runtime dependencies into ``out_dir``; raise MavenMissing or MavenFailed."""
    cmd = [
        mvn(),
        "-B",
        "--strict-checksums",
        "-Dstyle.color=never",
        "-f",
        str(pom),
        DEPENDENCY_PLUGIN,
        *options,
        f"-DoutputDirectory={out_dir}",
        "-DincludeScope=runtime",
    ]
    with log_path.open("w", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=maven_env(),
            cwd=str(cwd or out_dir),
        )
        try:
            fetched, tail = _follow(proc, log, progress)
            rc = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    if rc != 0:
        errors = [ln for ln in tail if ln.startswith("[ERROR]") and ln.strip() != "[ERROR]"]
        raise MavenFailed(rc, (errors[0] if errors else (tail[-1] if tail else "no output"))[:300], log_path)
    return fetched


def _follow(proc: subprocess.Popen[bytes], log: TextIO, progress: Progress) -> tuple[Fetched, list[str]]:
    """Read Maven's output (through a thread, so a quiet Maven still gets a heartbeat every HEARTBEAT_S):
    log every line, report each downloaded jar, count copies, keep the last 40 lines for the error."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.put(_ANSI.sub("", raw.decode("utf-8", "replace")).rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True, name="casque-maven-output").start()
    fetched, tail = Fetched(), list[str]()
    started = last_report = time.monotonic()
    while (line := _next(lines)) is not None:
        now = time.monotonic()
        if line:
            log.write(line + "\n")
            tail = (tail + [line])[-40:]
            if _count(line, fetched, progress):
                last_report = now
        if now - last_report >= HEARTBEAT_S:
            progress(
                f"  ... {now - started:.0f}s, {fetched.files_downloaded} files downloaded, {fetched.copied} jars copied"
            )
            last_report = now
    fetched.seconds = time.monotonic() - started
    return fetched, tail


def _next(lines: queue.Queue[str | None]) -> str | None:
    """The next line, "" after a second without one (time for a heartbeat), None at the end."""
    try:
        return lines.get(timeout=1.0)
    except queue.Empty:
        return ""


def _count(line: str, fetched: Fetched, progress: Progress) -> bool:
    """Count one line of Maven's output; True if it reported a downloaded jar."""
    m = _DOWNLOADED.search(line)
    if m:
        fetched.files_downloaded += 1
        if m.group(1).endswith(".jar"):
            fetched.jars_downloaded += 1
            name, size = m.group(1).rsplit("/", 1)[-1], m.group(2).split(" at ")[0]
            progress(f"  [{fetched.jars_downloaded:3d}] {name} ({size})")
            return True
    elif _COPYING.search(line):
        fetched.copied += 1
    return False
