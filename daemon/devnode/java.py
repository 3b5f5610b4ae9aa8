"""Find a JDK that Cassandra 5.0 can run on.

Cassandra 5.0 supports exactly Java 11 and Java 17; a newer JDK (the machine may have a
Temurin 21/25 as its default) makes the server fail deep inside startup with an obscure
reflection error. So we pick the JDK ourselves, verify its major version *before*
launching anything, and fail with a one-line message naming the fix otherwise.

Search order (first usable wins):

1. ``CASQUE_JAVA_HOME`` -- an explicit choice: it must be 11/17 or we fail (no fallback,
   silently ignoring what the user asked for would be worse).
2. ``JAVA_HOME`` -- used if it is 11/17; if it points at another version we keep looking,
   because developers often have JAVA_HOME set to a newer JDK for other work.
3. ``/usr/lib/jvm/*17*``, then ``/usr/lib/jvm/*11*`` (Debian/Ubuntu layout).
4. ``java`` on ``PATH``.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import JavaError

__all__ = [
    "SUPPORTED_MAJORS",
    "JavaInfo",
    "check_java_version",
    "probe_java",
    "find_java",
]

SUPPORTED_MAJORS: tuple[int, ...] = (11, 17)

_FIX = "install openjdk-17-jdk-headless or set CASQUE_JAVA_HOME to a JDK 17"

# `java -version` prints e.g.  openjdk version "17.0.15" 2025-04-15
#                              java version "1.8.0_392"
_VERSION_RE = re.compile(r'version\s+"([^"]+)"')


@dataclass(frozen=True)
class JavaInfo:
    """A verified JDK: the ``java`` binary, its home and its major version."""

    java: Path
    home: Path | None
    major: int
    version: str

    @property
    def java_home(self) -> Path:
        """JAVA_HOME to export for child tools (Maven, nodetool)."""
        return self.home if self.home is not None else self.java.resolve().parent.parent


def _major_of(version: str) -> int | None:
    """Major version from a Java version string: "17.0.2" -> 17, "1.8.0_392" -> 8."""
    m = re.match(r"(\d+)(?:\.(\d+))?", version.strip())
    if not m:
        return None
    first = int(m.group(1))
    if first == 1 and m.group(2) is not None:  # legacy "1.x" numbering (Java <= 8)
        return int(m.group(2))
    return first


def _version_from_output(text: str) -> str | None:
    m = _VERSION_RE.search(text)
    if m:
        return m.group(1)
    # Bare version strings ("17.0.2", "21") as a convenience for callers and tests.
    stripped = text.strip()
    if re.fullmatch(r"\d+(?:[._+\-][0-9A-Za-z.+_\-]*)?", stripped):
        return stripped
    return None


def check_java_version(version_string: str, where: str | os.PathLike[str] | None = None) -> int:
    """Return the major version if Cassandra 5.0 can run on it, else raise :class:`JavaError`.

    ``version_string`` is either the full ``java -version`` output or just the quoted
    version ("17.0.15", "1.8.0_392"). Pure function: no process is started.
    """
    at = f" at {where}" if where else ""
    version = _version_from_output(version_string)
    major = _major_of(version) if version else None
    if major is None:
        shown = version_string.strip().splitlines()[0][:60] if version_string.strip() else "(empty)"
        raise JavaError(
            f"casque: cannot read a Java version from {shown!r}{at}; Cassandra 5.0 needs Java 11 or 17: {_FIX}"
        )
    if major not in SUPPORTED_MAJORS:
        raise JavaError(f"casque: Java {major}{at} cannot run Cassandra 5.0 (it needs Java 11 or 17); {_FIX}")
    return major


def probe_java(java: str | os.PathLike[str], home: str | os.PathLike[str] | None = None) -> JavaInfo:
    """Run ``<java> -version`` and return a :class:`JavaInfo`, or raise :class:`JavaError`."""
    java_path = Path(java)
    where = home if home is not None else java_path
    try:
        out = subprocess.run(
            [str(java_path), "-version"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=30,
            check=False,
        ).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaError(f"casque: cannot run {java_path} ({exc}); {_FIX}") from exc
    major = check_java_version(out, where)
    version = _version_from_output(out) or str(major)
    return JavaInfo(java=java_path, home=Path(home) if home is not None else None, major=major, version=version)


def _java_in(home: Path) -> Path | None:
    candidate = home / "bin" / "java"
    return candidate if candidate.is_file() and os.access(candidate, os.X_OK) else None


def _candidates() -> list[tuple[Path, Path | None]]:
    """(java binary, home) pairs to try after the explicit overrides, best first."""
    found: list[tuple[Path, Path | None]] = []
    for pattern in ("/usr/lib/jvm/*17*", "/usr/lib/jvm/*11*"):
        for d in sorted(glob.glob(pattern)):
            home = Path(d)
            java = _java_in(home)
            if java is not None and not home.is_symlink():
                found.append((java, home))
        # Debian also ships symlinked aliases (java-1.17.0-openjdk-amd64): try them last.
        for d in sorted(glob.glob(pattern)):
            home = Path(d)
            java = _java_in(home)
            if java is not None and home.is_symlink():
                found.append((java, home))
    on_path = shutil.which("java")
    if on_path:
        found.append((Path(on_path), None))
    return found


def find_java() -> JavaInfo:
    """Locate a Java 11/17 runtime (see module docstring), or raise :class:`JavaError`."""
    explicit = os.environ.get("CASQUE_JAVA_HOME")
    if explicit:
        chosen = _java_in(Path(explicit))
        if chosen is None:
            raise JavaError(
                f"casque: CASQUE_JAVA_HOME={explicit} has no executable bin/java; point it at "
                f"a JDK 11 or 17 (e.g. /usr/lib/jvm/java-17-openjdk-amd64)"
            )
        return probe_java(chosen, Path(explicit))

    first_error: JavaError | None = None
    tried: set[Path] = set()
    candidates: list[tuple[Path, Path | None]] = []
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        from_env = _java_in(Path(java_home))
        if from_env is not None:
            candidates.append((from_env, Path(java_home)))
    candidates.extend(_candidates())

    for java, home in candidates:
        key = java.resolve()
        if key in tried:
            continue
        tried.add(key)
        try:
            return probe_java(java, home)
        except JavaError as exc:
            first_error = first_error or exc
    if first_error is not None:
        raise first_error
    raise JavaError(f"casque: no Java found (Cassandra 5.0 needs Java 11 or 17); {_FIX}")
