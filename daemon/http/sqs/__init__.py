"""The Amazon SQS-compatible endpoint (``casque serve``): ``build_app(cq)`` is its ASGI app."""

from daemon.http.sqs.app import build_app

__all__ = ["build_app"]
