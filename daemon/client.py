"""Public import path for the client: ``from daemon.client import Casque``.

The client lives in ``daemon.engine.client``; this module keeps the import that users write stable.
"""

from daemon.engine.client import Casque

__all__ = ["Casque"]
