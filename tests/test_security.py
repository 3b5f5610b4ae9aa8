"""Security against real nodes: password authentication, client TLS, and secrets kept out of logs.

The module starts two single-node clusters of its own with the project's launcher (in parallel,
so the module pays for one node start, not two) and stops them at the end:

* ``sec_auth`` (CQL 9442): ``PasswordAuthenticator`` + ``CassandraAuthorizer``, with a superuser
  ``casque`` role and a ``casque_app`` role limited to casque's keyspace, passwords random per run;
* ``sec_tls`` (CQL 9542): ``client_encryption_options`` required (not optional), with a server
  certificate signed by a CA made in this run (tests/support/certs.py).

The password is letters, digits and '-' only, so it would appear verbatim in both JSON and console
logs if it leaked (no escaping could hide it); its random part is what the tests look for.

That a task name can never import code (``os:system``, ``builtins.eval``, dotted paths) is shown by
tests/test_daemon.py::test_unknown_task_is_poisoned_and_nothing_is_imported, not repeated here.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from daemon.base.config import load_settings
from daemon.devnode import ClusterSpec, start, stop
from daemon.testing.daemonproc import ROOT, Daemon, records, start_daemon, wait_for, write_config

from .support.certs import CA, make_ca, make_server

KEYSPACE = "casque_sec"
USER = "casque"
APP_USER = "casque_app"  # a least-privilege role: permissions on casque's keyspace only
SECRET = secrets.token_hex(12)  # what the leak checks search for
PASSWORD = f"casque-{SECRET}"
APP_PASSWORD = f"app-{SECRET}"
WRONG_SECRET = secrets.token_hex(12)
WRONG_PASSWORD = f"wrong-{WRONG_SECRET}"
RUN = secrets.token_hex(3)  # queue names are new per run: the nodes' data outlives the run
STORE_PASSWORD = "sec-keystore"  # the server's PKCS12 keystore; not a casque secret

AUTH_SPEC = ClusterSpec(
    name="sec_auth",
    native_port=9442,
    storage_port=7400,
    jmx_base=7599,
    extra_yaml={"authenticator": "PasswordAuthenticator", "authorizer": "CassandraAuthorizer"},
)


@dataclass(frozen=True)
class Nodes:
    """The module's two clusters and the CAs the TLS tests trust (or wrongly trust)."""

    auth: ClusterSpec
    tls: ClusterSpec
    ca: CA
    other_ca: CA


def _tls_spec(keystore: Path) -> ClusterSpec:
    encryption = {
        "enabled": True,
        "optional": False,
        "keystore": str(keystore),
        "keystore_password": STORE_PASSWORD,
        "store_type": "PKCS12",
    }
    return ClusterSpec(
        name="sec_tls",
        native_port=9542,
        storage_port=7500,
        jmx_base=7699,
        extra_yaml={"client_encryption_options": encryption},
    )


def _in_parallel(fn: Callable[[ClusterSpec], Any], specs: list[ClusterSpec]) -> None:
    """Run ``fn`` on every spec at once (node starts are mostly waiting) and re-raise any failure."""
    with ThreadPoolExecutor(len(specs)) as pool:
        for future in [pool.submit(fn, s) for s in specs]:
            future.result()


def _restart(spec: ClusterSpec) -> None:
    """Stop a leftover node first: a reused JVM would keep an old keystore or yaml."""
    stop(spec, timeout=30)
    start(spec, timeout=150, progress=lambda line: print(f"[{spec.name}] {line}", file=sys.stderr))


def _session(port: int, user: str, password: str) -> Any:
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster

    cluster = Cluster(
        ["127.0.0.1"],
        port=port,
        protocol_version=5,
        connect_timeout=5,
        auth_provider=PlainTextAuthProvider(user, password),
    )
    try:
        return cluster, cluster.connect()
    except Exception:
        cluster.shutdown()
        raise


def _poll(what: str, fn: Callable[[], Any], timeout: float = 60) -> Any:
    """Retry ``fn`` until it returns without raising; the default superuser and a changed
    password both become usable a moment after the node answers CQL."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - any failure means "not yet"
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what} did not work within {timeout}s: {exc}") from exc
            time.sleep(0.5)


def _as_admin(port: int, *statements: str) -> None:
    """Run CQL as the default superuser cassandra/cassandra."""
    cluster, session = _poll("login as cassandra/cassandra", lambda: _session(port, "cassandra", "cassandra"))
    try:
        for cql in statements:
            session.execute(cql)
    finally:
        cluster.shutdown()


def _create_role(port: int, user: str, password: str, superuser: bool) -> None:
    """Create (or re-key, on a reused data dir) a login role, and return once it can log in."""
    _as_admin(
        port,
        f"CREATE ROLE IF NOT EXISTS {user} WITH PASSWORD = '{password}' "
        f"AND LOGIN = true AND SUPERUSER = {str(superuser).lower()}",
        f"ALTER ROLE {user} WITH PASSWORD = '{password}'",
    )
    cluster, _ = _poll(f"login as {user} with the new password", lambda: _session(port, user, password))
    cluster.shutdown()


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    pki = tmp_path_factory.mktemp("pki")
    ca, other_ca = make_ca(pki, "casque-test-ca"), make_ca(pki, "some-other-ca")
    server = make_server(ca, pki, "cassandra-server", STORE_PASSWORD)
    assert server.keystore is not None
    found = Nodes(AUTH_SPEC, _tls_spec(server.keystore), ca, other_ca)
    try:
        _in_parallel(_restart, [found.auth, found.tls])
        _create_role(found.auth.native_port, USER, PASSWORD, superuser=True)
        yield found
    finally:
        _in_parallel(lambda s: stop(s, timeout=30), [found.auth, found.tls])


# ---- helpers ---------------------------------------------------------------------------------
def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    """The test's environment without casque settings or credentials it might have inherited."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASQUE_") and k != "CREDENTIALS_DIRECTORY"}
    return env | {"PYTHONPATH": str(ROOT)} | extra


def casque(config: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", "-c", str(config), *args],
        cwd=ROOT,
        env=_clean_env(env or {}),
        capture_output=True,
        text=True,
        timeout=120,
    )


def config(
    tmp_path: Path, port: int, queue: str, log_format: str = "json", tls: dict[str, Any] | None = None, **cassandra: str
) -> Path:
    """write_config's daemon config, pointed at ``port`` with extra [cassandra] and [cassandra.tls] keys."""
    path = write_config(tmp_path / f"{queue}.toml", KEYSPACE, [queue])
    extra = "".join(f"{key} = {json.dumps(value)}\n" for key, value in {"port": port, **cassandra}.items())
    text = path.read_text().replace("[cassandra]\n", f"[cassandra]\n{extra}", 1)
    text = text.replace('format = "json"', f'format = "{log_format}"')
    if tls is not None:
        text += "\n[cassandra.tls]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in tls.items())
    path.write_text(text)
    return path


def secret_source(
    source: str, password: str, tmp_path: Path, user: str = USER
) -> tuple[dict[str, Any], dict[str, str]]:
    """[cassandra] keys and environment that hand ``password`` to casque the way ``source`` says."""
    if source == "password_file":
        path = tmp_path / f"{user}-password.txt"
        path.write_text(password + "\n")
        path.chmod(0o600)
        return {"username": user, "password_file": str(path)}, {}
    if source == "credentials_directory":  # what systemd's LoadCredential=cassandra-password:... gives
        creds = tmp_path / f"credentials-{user}"
        creds.mkdir(mode=0o700)
        (creds / "cassandra-password").write_text(password)
        return {"username": user}, {"CREDENTIALS_DIRECTORY": str(creds)}
    assert source == "environment"
    return {"username": user}, {"CASQUE_CASSANDRA__PASSWORD": password}


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{done.stderr}"
    return lines[0]


def assert_no_secret(*outputs: str) -> None:
    for text in outputs:
        assert SECRET not in text and WRONG_SECRET not in text, f"a password leaked into:\n{text}"


def stop_daemon(d: Daemon) -> int:
    d.signal(signal.SIGTERM)
    return d.wait(60)


def assert_logged(log: str, event: str, log_format: str) -> str:
    """The line with ``event``, rendered in ``log_format``: proof the capture saw real log lines."""
    lines = [line for line in log.splitlines() if event in line]
    assert lines, f"no {event} in the log:\n{log[-3000:]}"
    if log_format == "json":
        assert json.loads(lines[0])["event"] == event
    else:
        with pytest.raises(json.JSONDecodeError):
            json.loads(lines[0])
    return lines[0]


def serve_one_message(cfg: Path, queue: str, tmp_path: Path, env: dict[str, str], schema: bool = True) -> list[str]:
    """schema apply, queue create, send, run --check, then a daemon that processes the message;
    returns every output (the CLI's stdout and stderr, the daemon's log) for the leak checks."""
    outputs: list[str] = []

    def cli(*args: str) -> str:
        done = casque(cfg, *args, env=env)
        assert done.returncode == 0, f"{args}: {done.stderr}"
        outputs.extend([done.stdout, done.stderr])
        return done.stdout

    if schema:
        cli("schema", "apply")
    cli("queue", "create", queue, "--shards", "2")
    sent = cli("send", queue, "test.record", "--payload", '"hello"').strip()
    cli("run", "--check")
    record = tmp_path / f"{queue}.record"
    d = start_daemon(cfg, record, tmp_path / f"{queue}.log", env=_clean_env(env))
    try:
        wait_for(lambda: len(records(record)) == 1, 60, "the message processed", d)
    finally:
        assert stop_daemon(d) == 0, d.output()[-3000:]
    assert [r[:2] for r in records(record)] == [["test.record", sent]]
    return outputs + [d.output()]


# ---- settings (no node needed) ---------------------------------------------------------------
def test_password_is_not_in_the_settings_repr(tmp_path: Path) -> None:
    """A Settings object printed in a traceback or a debug line must not carry the password."""
    keys, _ = secret_source("password_file", PASSWORD, tmp_path)
    settings = load_settings(config(tmp_path, 9442, "q_repr", **keys), env={})
    assert settings.cassandra.password == PASSWORD  # read from the file, newline stripped
    assert_no_secret(repr(settings), repr(settings.cassandra), str(settings))


def test_password_sources_precede_each_other_as_documented(tmp_path: Path) -> None:
    """cassandra.password beats password_file, which beats $CREDENTIALS_DIRECTORY/cassandra-password."""
    keys, _ = secret_source("password_file", "from-file", tmp_path)
    _, cred_env = secret_source("credentials_directory", "from-credential", tmp_path)
    cfg = config(tmp_path, 9442, "q_order", **keys)
    assert load_settings(cfg, env=cred_env | {"CASQUE_CASSANDRA__PASSWORD": "direct"}).cassandra.password == "direct"
    assert load_settings(cfg, env=cred_env).cassandra.password == "from-file"
    no_file = config(tmp_path, 9442, "q_order2", username=USER)
    assert load_settings(no_file, env=cred_env).cassandra.password == "from-credential"


def test_a_mistyped_password_is_rejected_without_printing_it(tmp_path: Path) -> None:
    """A password that parses as a TOML number (all digits) is a config error, and the error
    names the key and the variable but never the value."""
    digits = str(10**15 + secrets.randbelow(10**15))
    done = casque(
        config(tmp_path, 9442, "q_typed", username=USER), "queues", env={"CASQUE_CASSANDRA__PASSWORD": digits}
    )
    assert done.returncode == 2
    line = one_line(done)
    assert "cassandra.password" in line and "CASQUE_CASSANDRA__PASSWORD" in line and "must be a string" in line
    assert digits not in done.stdout + done.stderr


# ---- password authentication -----------------------------------------------------------------
def test_wrong_password_is_a_one_line_error_naming_the_user_and_the_fix(nodes: Nodes, tmp_path: Path) -> None:
    """The CLI, and the daemon and the server as they start: waiting can't fix a rejected password (and a waiting
    process would never read a fixed password file), so they exit with the line; systemd's restart reads the fix.
    Neither the wrong password nor the right one is ever written."""
    keys, env = secret_source("password_file", WRONG_PASSWORD, tmp_path)
    cfg = config(tmp_path, nodes.auth.native_port, "q_wrong", **keys)
    expected = (
        f"Cassandra at 127.0.0.1:{nodes.auth.native_port} rejected the credentials for user '{USER}': "
        "check cassandra.username and the password"
    )
    for args, code, prefix in (
        (["schema", "apply"], 5, "casque: "),
        (["queues"], 5, "casque: "),
        (["run", "--check"], 1, "casque: check failed: "),
        (["run"], 5, "casque: "),
        (["serve", "--port", "0"], 5, "casque: "),
    ):
        done = casque(cfg, *args, env=env)
        assert done.returncode == code, (args, done.stderr)
        assert one_line(done) == prefix + expected
        assert_no_secret(done.stdout, done.stderr)


@pytest.mark.parametrize("source", ["password_file", "credentials_directory", "environment"])
@pytest.mark.parametrize("log_format", ["json", "console"])
def test_right_password_works_and_never_reaches_a_log(
    nodes: Nodes, tmp_path: Path, source: str, log_format: str
) -> None:
    """Schema, queue, send and a daemon that processes the message, all logged in via ``source``;
    the password appears in none of the CLI's or the daemon's output (daemon at debug level)."""
    keys, env = secret_source(source, PASSWORD, tmp_path)
    queue = f"q_{source[:4]}_{log_format}_{RUN}"
    cfg = config(tmp_path, nodes.auth.native_port, queue, log_format, **keys)
    outputs = serve_one_message(cfg, queue, tmp_path, env)
    assert_logged(outputs[-1], "worker_ready", log_format)
    assert_no_secret(*outputs)


def test_a_role_with_only_keyspace_permissions_runs_all_but_schema_apply(nodes: Nodes, tmp_path: Path) -> None:
    """Least privilege: GRANT ALL PERMISSIONS ON KEYSPACE is enough to create queues, send and run
    the daemon; only ``schema apply`` needs CREATE on all keyspaces, so an administrator runs it."""
    port = nodes.auth.native_port
    admin_keys, admin_env = secret_source("password_file", PASSWORD, tmp_path)
    applied = casque(config(tmp_path, port, "q_admin", **admin_keys), "schema", "apply", env=admin_env)
    assert applied.returncode == 0, applied.stderr
    _create_role(port, APP_USER, APP_PASSWORD, superuser=False)
    _as_admin(port, f"GRANT ALL PERMISSIONS ON KEYSPACE {KEYSPACE} TO {APP_USER}")
    keys, env = secret_source("credentials_directory", APP_PASSWORD, tmp_path, APP_USER)
    queue = f"q_app_{RUN}"
    cfg = config(tmp_path, port, queue, **keys)
    denied = casque(cfg, "schema", "apply", env=env)
    assert denied.returncode == 5
    assert f"User {APP_USER} has no CREATE permission on <all keyspaces>" in one_line(denied)
    outputs = serve_one_message(cfg, queue, tmp_path, env, schema=False)
    assert_no_secret(applied.stdout, applied.stderr, denied.stdout, denied.stderr, *outputs)


# ---- client TLS ------------------------------------------------------------------------------
def test_tls_client_trusting_the_right_ca_connects_and_works(nodes: Nodes, tmp_path: Path) -> None:
    """The node refuses plain-text clients (next test), so this working at all means TLS, with
    the server's certificate verified against our CA and its IP SAN (check_hostname on)."""
    tls = {"enabled": True, "ca_file": str(nodes.ca.cert), "check_hostname": True}
    queue = f"q_tls_{RUN}"
    outputs = serve_one_message(config(tmp_path, nodes.tls.native_port, queue, tls=tls), queue, tmp_path, {})
    assert_logged(outputs[-1], "worker_ready", "json")


def test_client_without_tls_gets_a_one_line_error_saying_to_enable_it(nodes: Nodes, tmp_path: Path) -> None:
    done = casque(config(tmp_path, nodes.tls.native_port, "q_plain"), "queues")
    assert done.returncode == 5
    assert one_line(done) == (
        f"casque: Cassandra at 127.0.0.1:{nodes.tls.native_port} dropped the connection during "
        "the handshake: if it requires client encryption, set cassandra.tls.enabled = true "
        "and cassandra.tls.ca_file"
    )


def test_client_trusting_another_ca_gets_a_one_line_tls_error(nodes: Nodes, tmp_path: Path) -> None:
    tls = {"enabled": True, "ca_file": str(nodes.other_ca.cert)}
    done = casque(config(tmp_path, nodes.tls.native_port, "q_wrongca", tls=tls), "queues")
    assert done.returncode == 5
    line = one_line(done)
    assert line.startswith(
        f"casque: TLS handshake with Cassandra at 127.0.0.1:{nodes.tls.native_port} failed: "
        "check cassandra.tls.ca_file/cert_file ("
    )
    assert "certificate verify failed" in line
