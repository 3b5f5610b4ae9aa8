"""The style checks run with the suite: ruff's lint, ruff's format check and mypy's type check.

Why a test and not only a CI step: `make test` (the README's one test command, and what CI runs) then refuses
code that the checks refuse, and a failure shows the tools' own output. The tools come from the venv the suite
runs in (they are pinned in requirements.lock), so everyone checks with the same versions; their settings live in
pyproject.toml. No Cassandra node is needed, and no test order: each check reads the source tree only.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m <tool> ...` from the repository root (where pyproject.toml gives the settings)."""
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )


def assert_clean(result: subprocess.CompletedProcess[str], what: str) -> None:
    """Fail with the tool's own report, so the fix needs no second run to find."""
    assert result.returncode == 0, f"{what} failed (exit {result.returncode}):\n{result.stdout}{result.stderr}"


def test_ruff_check_finds_nothing() -> None:
    assert_clean(run_tool("ruff", "check", "--no-cache", "."), "ruff check")


def test_ruff_format_would_change_nothing() -> None:
    assert_clean(run_tool("ruff", "format", "--check", "--no-cache", "."), "ruff format --check (run `make format`)")


def test_mypy_finds_no_type_errors() -> None:
    # files and flags come from [tool.mypy]; no cache read or written: every run checks the tree as it is
    assert_clean(run_tool("mypy", "--no-incremental", "--cache-dir=/dev/null"), "mypy")
