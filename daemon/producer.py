"""Public import path for jobs: ``from daemon.producer import Job``.

The producer lives in ``daemon.engine.send.producer``; this module keeps the import that users write stable.
"""

from daemon.engine.send.producer import Job, OnConflict

__all__ = ["Job", "OnConflict"]
