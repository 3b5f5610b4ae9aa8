"""Build the Java and Go SDK checks (tests/java, tests/go) once, into casque's per-user cache.

``python -m tests.support.sdkbuild`` (run by ``make setup``) builds both and prints how long each
took; tests/test_sqs_sdks.py calls ``java_command()`` / ``go_command()``, which build on first use
and are a directory check afterwards. Where: ``${XDG_CACHE_HOME:-~/.cache}/casque/sdk-checks/
<lang>-<hash of the sources>``, so editing a source or a pin builds again and nothing lands in the
work tree. A ``.complete`` marker is written last and the build held under a file lock, so an
interrupted build or two parallel first runs never leave a half-built check that looks finished.

Integrity: Maven copies the jars with ``--strict-checksums`` (each must match the SHA-1 Maven Central
publishes), and the versions are pinned in tests/java/pom.xml. Go checks every module against
tests/go/go.sum (``-mod=readonly``: a build never rewrites the pins).

A missing tool raises ``SdkToolMissing`` whose message is the one-line fix: the test fails with it
(a check that silently skipped would claim compatibility nobody measured).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from daemon.devnode.jar_set import cache_root
from daemon.devnode.locks import locked

ROOT = Path(__file__).resolve().parents[2]
JAVA_SRC, GO_SRC = ROOT / "tests" / "java", ROOT / "tests" / "go"
COPY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies"
MARKER = ".complete"
FIX = {
    "mvn": "apt-get install maven",
    "javac": "apt-get install openjdk-17-jdk-headless",
    "java": "apt-get install openjdk-17-jdk-headless",
    "go": "install Go 1.22+ from https://go.dev/dl/ and put its bin/ on PATH",
}


class SdkToolMissing(AssertionError):
    """A build tool is not on PATH; the message says how to install it."""


def tool(name: str) -> str:
    path = shutil.which(name)
    if not path:
        raise SdkToolMissing(f"casque: the SDK compatibility tests need `{name}`: {FIX[name]}")
    return path


def build_dir(lang: str, src: Path, names: tuple[str, ...]) -> Path:
    """The cache folder for these exact sources: a new pin or edit gets a new folder."""
    digest = hashlib.sha256(b"".join((src / n).read_bytes() for n in names)).hexdigest()[:12]
    return cache_root() / "sdk-checks" / f"{lang}-{digest}"


def _build_once(target: Path, build: Callable[[Path], None]) -> None:
    if (target / MARKER).is_file():
        return
    with locked(target.parent, f".{target.name}.lock"):
        if (target / MARKER).is_file():
            return
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        started = time.monotonic()
        build(target)
        (target / MARKER).write_text(json.dumps({"seconds": round(time.monotonic() - started, 1)}) + "\n")


def _run(cmd: list[str], cwd: Path, log: Path, env: dict[str, str] | None = None) -> None:
    with log.open("ab") as fh:
        done = subprocess.run(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=1800)
    if done.returncode:
        raise AssertionError(f"casque: `{' '.join(cmd)}` failed ({done.returncode}): see {log}")


def _build_java(target: Path) -> None:
    mvn, javac = tool("mvn"), tool("javac")
    log = target / "build.log"
    _run(
        [
            mvn,
            "-q",
            "-B",
            "--strict-checksums",
            "-f",
            str(JAVA_SRC / "pom.xml"),
            COPY_PLUGIN,
            f"-DoutputDirectory={target / 'lib'}",
        ],
        JAVA_SRC,
        log,
    )
    _run(
        [javac, "-encoding", "UTF-8", "-cp", str(target / "lib" / "*"), "-d", str(target / "classes"), "SqsCheck.java"],
        JAVA_SRC,
        log,
    )


def _build_go(target: Path) -> None:
    env = dict(os.environ, GOFLAGS="-mod=readonly", CGO_ENABLED="0")
    _run([tool("go"), "build", "-trimpath", "-o", str(target / "sqscheck"), "."], GO_SRC, target / "build.log", env)


def java_command() -> list[str]:
    """``java -cp ... SqsCheck`` (append ENDPOINT QUEUE_NAME), built first if needed."""
    java = tool("java")
    target = build_dir("java", JAVA_SRC, ("pom.xml", "SqsCheck.java"))
    _build_once(target, _build_java)
    return [java, "-cp", f"{target / 'classes'}{os.pathsep}{target / 'lib' / '*'}", "SqsCheck"]


def go_command() -> list[str]:
    """The built ``sqscheck`` binary (append ENDPOINT QUEUE_NAME), built first if needed."""
    target = build_dir("go", GO_SRC, ("go.mod", "go.sum", "main.go", "shape.go"))
    _build_once(target, _build_go)
    return [str(target / "sqscheck")]


def main() -> int:
    failed = 0
    for name, build in (("Java SDK v2 check", java_command), ("Go SDK v2 check", go_command)):
        started = time.monotonic()
        try:
            build()
        except AssertionError as exc:  # a missing tool or a failed build: one line, then the other check
            print(exc, file=sys.stderr)
            failed += 1
            continue
        print(f"casque: {name} ready in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
