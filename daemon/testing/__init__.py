"""The harness tests and the bench share (like ``structlog.testing``): start a real daemon process
(``daemonproc``), run the kill/race fault scenarios and count what was lost or ran twice (``chaos``),
and settings for a local multi-node cluster (``nodes``).

Why here and not in tests/: the bench (bench/soak.py, bench/daemonproc.py) runs the same daemons and
scenarios, and the bench must not import tests (tests/test_layers.py checks it). Why in daemon/: it
is shipped code the layers test ranks, a face above ``daemon.service`` (it starts daemons and drives
the engine's client), below nothing. It never imports tests or bench; a test's handler module is a
name written into a daemon config, imported by the daemon process, not by this package.
"""
