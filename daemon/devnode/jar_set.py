"""A set of jars fetched once by Maven into casque's per-user cache, and checked at every use.

Two things are fetched this way: the dev node's Cassandra (daemon/devnode/download.py) and the pipeline's
Spark Cassandra connector (pipeline/jars.py). Each names its POM, its main jar and that jar's SHA-256; the
rest is here, once.

Integrity: Maven's ``--strict-checksums`` refuses a jar whose SHA-1 differs from the one Central publishes
(daemon/devnode/maven.py), and the main jar is compared with the SHA-256 pinned by the caller, at the download
and at every use, so a compromised mirror or a ``~/.m2`` poisoned with another build is refused.

Atomicity: jars land in ``lib.partial``; a ``.complete`` marker is written after the check and the directory
renamed to ``lib``, under a file lock, so an interrupted download (Ctrl-C, a network drop) or two parallel
first runs never leave half a set: no marker means "not downloaded", and the next call starts again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .locks import locked
from .maven import MavenFailed, MavenMissing, Progress, copy_dependencies

MARKER = ".complete"


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/casque`` (default ``~/.cache/casque``): outside any repository."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "casque"


@dataclass(frozen=True)
class JarSet:
    """One caller's jars: where they live, how they are fetched and how they are checked."""

    name: str  # what messages call it: "cassandra-all 5.0.6"
    target: Path  # jars in ``target/lib``, the marker and Maven's log beside them
    pom: Path | str  # the POM, or its text (written beside the jars when they are fetched)
    main_jar: str  # the file name of the jar whose SHA-256 is pinned
    sha256: str | None  # as published on Maven Central; None: recorded at the download, not checked
    m2_dir: str  # the main jar's folder under ``~/.m2/repository``, named in the fix
    min_jars: int  # far fewer means the resolution went wrong
    error: Callable[[str], Exception]  # the caller's own error, raised with a message naming the fix
    options: Sequence[str] = ()  # Maven's, for the copy
    size: str = ""  # what a first fetch downloads, for its announcement: "~100 jars, ~70 MB"

    @property
    def lib(self) -> Path:
        return self.target / "lib"

    def installed(self) -> bool:
        """A complete download is in the cache (checked at use: ``ensure``)."""
        return (self.target / MARKER).is_file() and (self.lib / self.main_jar).is_file()

    def ensure(self, progress: Progress) -> list[Path]:
        """The jars, downloaded if needed, the main jar checked: cheap once cached (a marker check and one
        SHA-256). Raises the caller's error naming the fix if Maven is missing, fails, or a check fails."""
        if not self.installed():
            with locked(self.target):  # parallel first runs wait for one download
                if not self.installed():
                    self._download(progress)
        self._check(self.lib)
        return sorted(self.lib.glob("*.jar"))

    def _download(self, progress: Progress) -> None:
        partial = self.target / "lib.partial"
        for stale in (partial, self.lib):
            shutil.rmtree(stale, ignore_errors=True)
        (self.target / MARKER).unlink(missing_ok=True)
        partial.mkdir(parents=True)
        progress(f"casque: fetching {self.name} ({self.size}) from Maven Central into {self.target}; this happens once")
        log, pom = self.target / "maven.log", self.pom
        if isinstance(pom, str):
            text, pom = pom, self.target / "pom.xml"
            pom.write_text(text, encoding="utf-8")
        try:
            try:
                fetched = copy_dependencies(pom, partial, log, progress, options=self.options, cwd=self.target)
            except MavenMissing:
                raise self.error(
                    f"Maven (mvn) is not on PATH: install it (apt-get install maven); it fetches {self.name} once"
                ) from None
            except MavenFailed as exc:
                raise self.error(
                    f"Maven failed (exit {exc.rc}) fetching {self.name}: {exc.reason}; check network/proxy "
                    f"(~/.m2/settings.xml) and retry, full log: {log}"
                ) from None
            digest = self._check(partial)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)  # no half set left behind
            raise
        partial.rename(self.lib)
        jars = sorted(self.lib.glob("*.jar"))
        size = sum(j.stat().st_size for j in jars)
        marker = {
            "name": self.name,
            "sha256": digest,
            "pinned": self.sha256 is not None,
            "jars": len(jars),
            "bytes": size,
            "seconds": round(fetched.seconds, 1),
            "completed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        tmp = self.target / (MARKER + ".tmp")
        tmp.write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        tmp.rename(self.target / MARKER)
        if self.sha256 is None:
            progress(f"casque: note: no SHA-256 is pinned for {self.name}; recorded {digest} (Maven checked SHA-1s)")
        progress(
            f"casque: {self.name} ready: {len(jars)} jars in place, {size / 1e6:.0f} MB in {fetched.seconds:.0f}s "
            f"({fetched.jars_downloaded} jars downloaded, the others were already in ~/.m2)"
        )

    def _check(self, lib: Path) -> str:
        """Check the jar set in ``lib``; return the main jar's SHA-256 or raise."""
        jar = lib / self.main_jar
        if not jar.is_file():
            raise self.error(f"{jar} is missing after the Maven download: delete {self.target} and retry")
        digest = sha256(jar)
        if self.sha256 is not None and digest != self.sha256:
            raise self.error(
                f"{jar.name} has SHA-256 {digest} but {self.sha256} is pinned: the download is corrupt or tampered; "
                f"delete ~/.m2/repository/{self.m2_dir} and {self.target}, then retry"
            )
        count = len(list(lib.glob("*.jar")))
        if count < self.min_jars:
            raise self.error(
                f"only {count} jars were fetched for {self.name}: delete {self.target} and retry "
                f"(log: {self.target / 'maven.log'})"
            )
        return digest


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
