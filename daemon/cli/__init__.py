"""The ``casque`` command line (a face: it imports the engine and the service, never the reverse)."""

from daemon.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
