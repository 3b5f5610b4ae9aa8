"""The running daemon: the handler API, the registry, the dispatcher and the worker process.

It drives the engine (``daemon.engine``) and never reaches into the faces (CLI, HTTP) above it.
"""
