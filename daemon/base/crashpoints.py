"""Named crash points: a real seam for fault tests, off unless an environment variable names one.

``CASQUE_CRASH_AT=<step>`` makes the process exit at once (``os._exit``: no cleanup, no flush, no
finally, exactly what ``kill -9`` leaves behind) the first time it reaches that step. Tests start a
real daemon with it, let it die mid-protocol, restart it and count what was lost or doubled.
Never set in production. The variable is read once, so an unset one costs a string compare.
"""

from __future__ import annotations

import os

CRASH_EXIT_CODE = 137  # what a shell reports for a process killed by SIGKILL
_AT = os.environ.get("CASQUE_CRASH_AT", "")


def crash_point(step: str) -> None:
    """Exit at once if the environment names this step."""
    if _AT and _AT == step:
        os._exit(CRASH_EXIT_CODE)
