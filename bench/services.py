"""The peers' servers, started and stopped by the bench itself: Debian's redis-server and PostgreSQL.

Each runs as the bench's own process on its own port (never the system service, never a port
something else may use) and is stopped by its pid when the peers are done.

Durability is set no stronger than the Cassandra node's (commitlog_sync periodic, 10 s), so no
peer pays for safety casque's node does not give: Redis keeps its defaults (RDB snapshots, no
AOF), PostgreSQL runs with ``synchronous_commit = off`` (a commit is flushed within 3 × 200 ms).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from .env import out_dir, progress

REDIS_PORT = 6391
PG_PORT = 5439
PG_DIR = Path("/var/tmp/casque-bench-pg")
PG_DB = "casque_bench"


def redis_url(db: int = 0) -> str:
    return f"redis://127.0.0.1:{REDIS_PORT}/{db}"


def pg_dsn() -> str:
    return f"postgresql://postgres@127.0.0.1:{PG_PORT}/{PG_DB}"


@contextlib.contextmanager
def redis_server() -> Iterator[subprocess.Popen[bytes]]:
    exe = shutil.which("redis-server") or "/usr/bin/redis-server"
    d = out_dir("redis")
    for f in d.glob("*.rdb"):
        f.unlink()
    with open(d / "redis.log", "wb") as log:
        proc = subprocess.Popen(
            [exe, "--port", str(REDIS_PORT), "--bind", "127.0.0.1", "--dir", str(d), "--daemonize", "no"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_port(REDIS_PORT, proc, "redis-server")
            progress(f"redis-server {_redis_version(exe)} on 127.0.0.1:{REDIS_PORT} (pid {proc.pid})")
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


def _redis_version(exe: str) -> str:
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("v=")), "?")


def _pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise SystemExit("bench: PostgreSQL is not installed: apt-get install postgresql")
    return Path(found[-1]).parent


def _as_postgres(args: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run its tools as the 'postgres' user."""
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@contextlib.contextmanager
def postgres_server() -> Iterator[int]:
    bindir = _pg_bin()
    if not (PG_DIR / "PG_VERSION").exists():
        PG_DIR.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(PG_DIR, "postgres", "postgres")
        subprocess.run(
            _as_postgres([str(bindir / "initdb"), "-D", str(PG_DIR), "-A", "trust", "-U", "postgres", "--no-sync"]),
            check=True,
            stdout=subprocess.DEVNULL,
        )
    opts = (
        f"-p {PG_PORT} -c listen_addresses=127.0.0.1 -c unix_socket_directories={PG_DIR} -c synchronous_commit=off "
        "-c shared_buffers=256MB -c max_connections=200"
    )
    subprocess.run(
        _as_postgres(
            [str(bindir / "pg_ctl"), "-D", str(PG_DIR), "-l", str(PG_DIR / "server.log"), "-o", opts, "-w", "start"]
        ),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    try:
        pid = int((PG_DIR / "postmaster.pid").read_text().split()[0])
        version = subprocess.run([str(bindir / "postgres"), "--version"], capture_output=True, text=True).stdout.strip()
        progress(f"{version} on 127.0.0.1:{PG_PORT} (pid {pid}, synchronous_commit=off)")
        psql = [str(bindir / "psql"), "-h", "127.0.0.1", "-p", str(PG_PORT), "-U", "postgres", "-q"]
        exists = subprocess.run(
            psql + ["-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{PG_DB}'"], capture_output=True, text=True
        ).stdout.strip()
        if exists != "1":
            subprocess.run(psql + ["-c", f"CREATE DATABASE {PG_DB}"], check=True)
        yield pid
    finally:
        subprocess.run(
            _as_postgres([str(bindir / "pg_ctl"), "-D", str(PG_DIR), "-m", "fast", "-w", "stop"]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


def children_of(pid: int) -> list[int]:
    """A process and its children (PostgreSQL forks a backend per connection)."""
    pids = [pid]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                pids.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            pass
    return pids


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 30.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: see bench/out/redis/redis.log")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout:.0f}s")
