"""Settings: one TOML file, overridable per option from the environment.

Where the file comes from, first match wins: ``-c/--config PATH``, ``$CASQUE_CONFIG``,
``./config/casque.toml``, ``/etc/casque/casque.toml``; with none of them the built-in defaults apply.

Environment overrides: ``CASQUE_<SECTION>__<OPTION>`` (two underscores between the levels), e.g.
``CASQUE_CASSANDRA__CONTACT_POINTS='["10.0.0.1","10.0.0.2"]'`` or ``CASQUE_WORKER__CONSUMERS=8``.
The value is read as a TOML value when it parses as one, and as a plain string otherwise.
Secrets (``cassandra.password``) are best given as ``cassandra.password_file`` or through systemd's
``LoadCredential=`` (``$CREDENTIALS_DIRECTORY/cassandra-password``) and are never logged.

Every error names the bad key and where it came from, and says what would be accepted.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.base.durations import parse_duration
from daemon.base.errors import ConfigError

ENV_PREFIX = "CASQUE_"


@dataclass
class TLSSettings:
    enabled: bool = False
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    check_hostname: bool = False


@dataclass
class CassandraSettings:
    contact_points: list[str] = field(default_factory=lambda: ["127.0.0.1"])
    port: int = 9042
    keyspace: str = "casque"
    local_dc: str = ""
    consistency: str = "LOCAL_QUORUM"
    serial_consistency: str = "LOCAL_SERIAL"
    username: str = ""
    password: str = field(default="", repr=False)
    password_file: str = ""
    connect_timeout: float = 5.0
    request_timeout: float = 10.0
    tls: TLSSettings = field(default_factory=TLSSettings)


@dataclass
class SchemaSettings:
    replication_class: str = "SimpleStrategy"
    replication_factor: int = 1
    datacenters: dict[str, int] = field(default_factory=dict)


@dataclass
class QueueDefaults:
    shards: int = 16
    buckets: int = 24
    bucket_seconds: int = 300
    lock_ttl: float = 5.0
    timeout: float = 30.0
    max_attempts: int = 5
    retention: float = 7 * 86400.0
    max_payload_bytes: int = 256 * 1024


@dataclass
class WorkerSettings:
    queues: list[str] = field(default_factory=list)  # empty: the queues the registered handlers name
    handler_modules: list[str] = field(default_factory=lambda: ["handlers.examples", "handlers.builtin"])
    consumers: int = 16
    batch_size: int = 400
    #: Durations are ms ints (the engine's unit); the file's keys are the names without ``_ms``,
    #: holding any duration ("20ms", "1s", 5) converted once as the file is read.
    poll_interval_ms: int = 20
    #: The safety poll: sends wake the daemon (wake hints), this finds what no hint announced.
    max_poll_interval_ms: int = 1000
    in_flight: int = 500
    sync_threads: int = 8
    drain_timeout_ms: int = 30_000
    clock_tolerance_ms: int = 5000
    rescan_interval_ms: int = 10_000
    expiry_interval_ms: int = 60_000  # how often the one lease holder deletes queues idle past their expire_after
    #: Keep the lock of the rows this daemon owns between takes (engine/take/holds.py): a take is then
    #: one read and one batch instead of six round trips.
    hold_rows: bool = True
    #: Take a message up to this long before it is due and start its handler at the due time.
    take_ahead_ms: int = 50


@dataclass
class LogSettings:
    level: str = "info"
    format: str = "auto"


@dataclass
class MetricsSettings:
    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = 9464
    #: Queue-level gauges (depth, scheduled, in flight, poisoned, oldest due age), computed from
    #: Cassandra by one daemon at a time (a lease) every ``queue_gauges_interval``.
    queue_gauges: bool = True
    queue_gauges_interval: float = 15.0
    queue_gauges_queues: list[str] = field(default_factory=list)  # empty: the queues used lately (<= 1,000)


@dataclass
class ConsoleSettings:
    """The operators' web console (``casque web``, or beside the SQS endpoint in ``casque serve``).
    Users are ``admin`` (may act) and ``viewer`` (read-only); each password is also accepted as a
    bearer token. With no password set, ``casque web`` makes a random admin password and prints it."""

    host: str = "127.0.0.1"
    port: int = 9470
    root_path: str = ""
    admin_password: str = field(default="", repr=False)
    viewer_password: str = field(default="", repr=False)
    refresh: float = 5.0
    page_size: int = 25


@dataclass
class SqsSettings:
    """``casque serve``: the SQS-compatible endpoint, and the pull API's long-poll cadence."""

    host: str = "127.0.0.1"
    port: int = 9324
    auth: str = "none"
    region: str = "us-east-1"
    account: str = "000000000000"
    task: str = "sqs"
    cert_file: str = ""
    key_file: str = ""
    console: bool = False  # casque serve also serves the console at /console
    workers: int = 1  # server processes on the port (daemon/http/workers.py)
    #: The shape of a standard queue created over SQS that asks for none (casque.shards, ...: docs/sqs.md):
    #: tiny, one row, as a per-user queue should be (docs/design.md, "Many queues").
    queue_shards: int = 1
    queue_buckets: int = 1
    queue_bucket_seconds: int = 300
    #: Such a queue doubles its shards up to this many when its sends pass ``grow_rate`` (0: never grows).
    queue_max_shards: int = 16
    #: Sends per second per shard, over ``grow_window``, past which a queue grows (engine/operations/shard_growth.py).
    grow_rate: float = 150.0
    grow_window_ms: int = 10_000
    #: How long after a growth its old layout may be dropped: every sender's cached settings (at most 60 s old) and a
    #: long poll's (20 s more) must have expired, so at least 90 s (engine/operations/reshard.py ``SETTLE_MS``).
    grow_settle_ms: int = 120_000


@dataclass
class HintSettings:
    """Wake hints (docs/design.md, "Wake hints"): signed UDP datagrams that wake other processes'
    consumers and long polls right after a send, instead of at their next poll."""

    listen: bool = True  # casque run and casque serve receive hints for what they serve
    send: bool = True  # every client hints the listeners of a queue after each acknowledged send
    address: str = ""  # bind host[:port]; empty: the address that reaches Cassandra (127.0.0.1 if local), a free port
    advertise: str = ""  # host[:port] producers should send to, when it differs from the bound one (NAT)
    refresh: float = 1.0  # how long a producer trusts its list of listeners (a consumer started since: no hints)


@dataclass
class Settings:
    cassandra: CassandraSettings = field(default_factory=CassandraSettings)
    schema: SchemaSettings = field(default_factory=SchemaSettings)
    queue_defaults: QueueDefaults = field(default_factory=QueueDefaults)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    log: LogSettings = field(default_factory=LogSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    console: ConsoleSettings = field(default_factory=ConsoleSettings)
    sqs: SqsSettings = field(default_factory=SqsSettings)
    hints: HintSettings = field(default_factory=HintSettings)
    source: str = field(default="<defaults>", compare=False)


_DURATION_FIELDS = {
    "lock_ttl",
    "timeout",
    "retention",
    "poll_interval",
    "max_poll_interval",
    "drain_timeout",
    "clock_tolerance",
    "rescan_interval",
    "expiry_interval",
    "connect_timeout",
    "request_timeout",
    "refresh",
    "queue_gauges_interval",
    "take_ahead",
    "grow_window",
    "grow_settle",
}
#: Durations with a floor a guarantee rests on (seconds), by key as ``_RANGES``.
_MIN_SECONDS = {"sqs.grow_settle": 90}
#: Integer settings with bounds of their own (a queue's shape: engine/queues/settings.py has the same limits).
_RANGES = {
    "sqs.queue_shards": (1, 4096),
    "sqs.queue_buckets": (1, 1024),
    "sqs.queue_bucket_seconds": (1, 86400),
    "sqs.queue_max_shards": (0, 4096),
}
_CHOICES = {
    "log.level": {"debug", "info", "warning", "error"},
    "log.format": {"auto", "console", "json"},
    "schema.replication_class": {"SimpleStrategy", "NetworkTopologyStrategy"},
    "sqs.auth": {"none", "sigv4"},
}


def default_config_path() -> Path | None:
    """The first config file that exists in the documented search order, if any."""
    env = os.environ.get("CASQUE_CONFIG")
    if env:
        return Path(env)
    for candidate in (Path("config/casque.toml"), Path("/etc/casque/casque.toml")):
        if candidate.is_file():
            return candidate
    return None


def load_settings(path: str | Path | None = None, env: dict[str, str] | None = None) -> Settings:
    """Read the TOML file (or defaults), apply CASQUE_* overrides, validate, and return Settings."""
    env = dict(os.environ) if env is None else env
    source_path = Path(path) if path else default_config_path()
    data: dict[str, Any] = {}
    source = "<defaults>"
    if source_path is not None:
        source = str(source_path)
        data = _read_toml(source_path)
    settings = _build(Settings, data, "", source)
    _apply_env(settings, env)
    _read_secrets(settings.cassandra, env)
    settings.source = source
    return settings


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(
            f"config file {path} does not exist: pass -c PATH or set CASQUE_CONFIG to an existing file"
        ) from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read ({exc.strerror}): check its permissions") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text: save it as UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


#: Keys that were removed and are still accepted, with no effect, so a file written for an older release loads:
#: ``queue_defaults.in_flight`` (every standard queue keeps its messages in flight in place: docs/design.md,
#: "Messages in flight"); ``sqs.poll_interval`` (a parked long poll re-reads nothing: the due feed finds what a
#: lost hint announced, docs/design.md "Long polls"); ``[cache]`` (the per-queue caches keep every queue in use,
#: base/lru.py).
_REMOVED = {"queue_defaults.in_flight", "sqs.poll_interval", "cache"}


def _build(cls: type, data: Any, prefix: str, source: str) -> Any:
    """Build dataclass ``cls`` from a dict, rejecting unknown keys and wrong types by name."""
    if not isinstance(data, dict):
        raise ConfigError(f"[{prefix.rstrip('.')}] in {source} must be a table")
    hints = typing.get_type_hints(cls)
    fields = _fields_by_key(cls)
    unknown = sorted(k for k in set(data) - set(fields) if prefix + k not in _REMOVED)
    if unknown:
        key = prefix + unknown[0]
        raise ConfigError(f"unknown key '{key}' in {source}: known keys here are {', '.join(sorted(fields))}")
    kwargs = {}
    for name in set(fields) & set(data):
        kwargs[fields[name]] = _coerce(hints[fields[name]], data[name], prefix + name, source)
    return cls(**kwargs)


def _fields_by_key(cls: type) -> dict[str, str]:
    """The file's key of each field: a duration kept in ms (``clock_tolerance_ms``) is written
    without the suffix (``clock_tolerance = "5s"``), so the file format stays what it was."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.name == "source":
            continue
        base = f.name.removesuffix("_ms")
        out[base if base in _DURATION_FIELDS else f.name] = f.name
    return out


def _coerce(hint: Any, value: Any, key: str, source: str) -> Any:
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, key + ".", source)  # type: ignore[arg-type]  # a field's hint is a class
    name = key.rsplit(".", 1)[-1]
    if name in _DURATION_FIELDS:
        try:
            seconds = parse_duration(value, key)
        except Exception:
            raise ConfigError(
                f"{key} in {source} must be a duration such as 5, '250ms', '30s' or '2m', got {value!r}"
            ) from None
        if key in _MIN_SECONDS and seconds < _MIN_SECONDS[key]:
            raise ConfigError(f"{key} in {source} must be at least {_MIN_SECONDS[key]}s, got {value!r}")
        return round(seconds * 1000) if hint is int else seconds  # an int field holds ms
    origin = typing.get_origin(hint)
    if origin is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key} in {source} must be a list of strings, got {value!r}")
        return list(value)
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(v, int) for v in value.values()):
            raise ConfigError(f"{key} in {source} must be a table of integers, got {value!r}")
        return dict(value)
    return _scalar(hint, value, key, source)


def _scalar(hint: Any, value: Any, key: str, source: str) -> Any:
    ok = (
        (hint is bool and isinstance(value, bool))
        or (hint is int and isinstance(value, int) and not isinstance(value, bool))
        or (hint is float and isinstance(value, (int, float)) and not isinstance(value, bool))
        or (hint is str and isinstance(value, str))
    )
    if not ok:
        # A secret's value must not reach stderr or the journal, even when it is the wrong type.
        got = (
            f"a value of type {type(value).__name__} (not shown: it is a secret)"
            if key.endswith("password")
            else repr(value)
        )
        raise ConfigError(f"{key} in {source} must be {_TYPE_NAMES[hint]}, got {got}")
    choices = _CHOICES.get(key)
    if choices and value not in choices:
        raise ConfigError(f"{key} in {source} must be one of {', '.join(sorted(choices))}, got {value!r}")
    if hint is int and value < 0:
        raise ConfigError(f"{key} in {source} must not be negative, got {value!r}")
    if key in _RANGES and not _RANGES[key][0] <= value <= _RANGES[key][1]:
        lo, hi = _RANGES[key]
        raise ConfigError(f"{key} in {source} must be between {lo} and {hi}, got {value!r}")
    if key.startswith("cache.") and value < 1:
        raise ConfigError(f"{key} in {source} must be at least 1 (entries kept per process), got {value!r}")
    return float(value) if hint is float else value


_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _apply_env(settings: Settings, env: dict[str, str]) -> None:
    for var, raw in sorted(env.items()):
        if not var.startswith(ENV_PREFIX) or "__" not in var or var == "CASQUE_CONFIG":
            continue
        path = var[len(ENV_PREFIX) :].lower().split("__")
        _set_path(settings, path, _env_value(raw), f"environment variable {var}")


def _set_path(settings: Settings, path: list[str], value: Any, source: str) -> None:
    target: Any = settings
    for i, part in enumerate(path):
        names = _fields_by_key(type(target))
        key = ".".join(path[: i + 1])
        if key in _REMOVED:
            return
        if part not in names:
            raise ConfigError(f"unknown key '{key}' in {source}: known keys here are {', '.join(sorted(names))}")
        if i == len(path) - 1:
            hint = typing.get_type_hints(type(target))[names[part]]
            setattr(target, names[part], _coerce(hint, value, key, source))
        else:
            target = getattr(target, names[part])


def _env_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def _read_secrets(cass: CassandraSettings, env: dict[str, str]) -> None:
    """Fill cassandra.password from password_file or a systemd credential, if not given directly."""
    if cass.password:
        return
    candidates = []
    if cass.password_file:
        candidates.append(Path(cass.password_file))
    cred_dir = env.get("CREDENTIALS_DIRECTORY")
    if cred_dir:
        candidates.append(Path(cred_dir) / "cassandra-password")
    for path in candidates:
        if path.is_file():
            cass.password = path.read_text().strip()
            return
    if cass.password_file:
        raise ConfigError(
            f"cassandra.password_file {cass.password_file} does not exist: create it or remove the option"
        )
