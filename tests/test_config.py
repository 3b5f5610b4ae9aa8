"""Configuration: TOML file, environment overrides, and errors that name the key and the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from daemon.base.config import load_settings
from daemon.base.durations import parse_duration
from daemon.base.errors import ConfigError, UsageError

ROOT = Path(__file__).resolve().parent.parent


def test_default_config_file_parses_and_matches_the_built_in_defaults() -> None:
    from_file = load_settings(ROOT / "config" / "casque.toml", env={})
    built_in = load_settings(None, env={"CASQUE_CONFIG": str(ROOT / "tests" / "support" / "empty.toml")})
    assert from_file.worker == built_in.worker
    assert from_file.queue_defaults == built_in.queue_defaults
    assert from_file.cassandra == built_in.cassandra
    assert from_file.hints == built_in.hints


def test_env_overrides_every_level(tmp_path: Path) -> None:
    s = load_settings(
        ROOT / "config" / "casque.toml",
        env={
            "CASQUE_WORKER__CONSUMERS": "9",
            "CASQUE_CASSANDRA__CONTACT_POINTS": '["10.0.0.1", "10.0.0.2"]',
            "CASQUE_CASSANDRA__TLS__ENABLED": "true",
            "CASQUE_QUEUE_DEFAULTS__TIMEOUT": "2m",
            "CASQUE_LOG__LEVEL": "debug",
        },
    )
    assert s.worker.consumers == 9
    assert s.cassandra.contact_points == ["10.0.0.1", "10.0.0.2"]
    assert s.cassandra.tls.enabled is True
    assert s.queue_defaults.timeout == 120.0
    assert s.log.level == "debug"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[worker]\nconsumrs = 3\n", "unknown key 'worker.consumrs' in {path}"),
        ("[worker]\nconsumers = 'many'\n", "worker.consumers in {path} must be an integer, got 'many'"),
        ("[worker]\ndrain_timeout = 'soon'\n", "worker.drain_timeout in {path} must be a duration"),
        ("[sqs]\ngrow_settle = '10s'\n", "sqs.grow_settle in {path} must be at least 90s, got '10s'"),
        ("[log]\nlevel = 'loud'\n", "log.level in {path} must be one of debug, error, info, warning"),
        ("[cassandra\nport = 1\n", "config file {path} is not valid TOML"),
        ("[nonsense]\n", "unknown key 'nonsense' in {path}"),
    ],
)
def test_bad_config_names_the_key_and_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_settings(path, env={})
    assert message.format(path=path) in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_env_override_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="environment variable CASQUE_WORKER__BATCH_SIZE"):
        load_settings(
            None, env={"CASQUE_WORKER__BATCH_SIZE": "lots", "CASQUE_CONFIG": str(ROOT / "config" / "casque.toml")}
        )


def test_missing_config_file_says_how_to_fix_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist: pass -c PATH or set CASQUE_CONFIG"):
        load_settings(tmp_path / "nope.toml", env={})


def test_cli_exits_2_with_one_line_on_a_bad_config(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[worker]\nconsumers = -1\n")
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "-c", str(path), "queues"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f"casque: worker.consumers in {path} must not be negative, got -1"


@pytest.mark.parametrize("bad", ["10 s", "5x", "-3s", "", "s", "1h-5m"])
def test_bad_durations_are_rejected_with_the_value(bad: str) -> None:
    with pytest.raises(UsageError, match="invalid delay"):
        parse_duration(bad, "delay")


@pytest.mark.parametrize(
    ("text", "seconds"), [("250ms", 0.25), ("10s", 10), ("5m", 300), ("1h30m", 5400), ("2d", 172800), ("1.5", 1.5)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
