"""casque: a durable task queue and scheduler on Apache Cassandra.

The engine is imported as ``daemon`` (the layout of the design card). Data flows one way:
producer -> table -> consumer -> dispatcher -> handler -> ack.
"""

__version__ = "0.1.0"

from daemon.service.handler import Backoff, Context, Handler, Poison, Retry  # noqa: E402
from daemon.service.hooks import Delivery, Middleware  # noqa: E402
from daemon.service.registry import register, registry, use  # noqa: E402

__all__ = ["Backoff", "Context", "Delivery", "Handler", "Middleware", "Poison", "Retry", "register", "registry", "use"]
