"""Named crash points: a real seam for fault tests, off unless an environment variable names one.

``CASQUE_CRASH_AT=<step>`` makes the process exit at once (``os._exit``: no cleanup, no flush, no
finally, exactly what ``kill -9`` leaves behind) the first time it reaches that step. Tests start a
real daemon with it, let it die mid-protocol, restart it and count what was lost or doubled.
Never set in production. The variable is read once, so an unset one costs a string compare.
"""

from __future__ import annotations

import os
import signal

CRASH_EXIT_CODE = 137  # what a shell reports for a process killed by SIGKILL
_AT = os.environ.get("CASQUE_CRASH_AT", "")


def crash_point(step: str) -> None:
    """Exit at once if the environment names this step."""
    if _AT and step == _AT:
        os._exit(CRASH_EXIT_CODE)


_PAUSE_AT = os.environ.get("CASQUE_PAUSE_AT", "")
_paused: set[str] = set()


def pause_point(step: str) -> None:
    """Freeze this process (SIGSTOP to itself, as ``kill -STOP`` from outside would) the first time
    it reaches the step the environment names with ``CASQUE_PAUSE_AT``; a test sends SIGCONT. A
    pause at an exact step (after a held row was read, before its take commits) is what proves
    that a process that wakes up after its lock expired does not commit."""
    if _PAUSE_AT and step == _PAUSE_AT and step not in _paused:
        _paused.add(step)
        os.kill(os.getpid(), signal.SIGSTOP)
