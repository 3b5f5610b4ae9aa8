"""The harness tests and the bench share (like ``structlog.testing``): start a real daemon process
(``daemonproc``) whose recording handlers (``handlers``, imported by that process, named in its
config) write what ran, run the kill/race fault scenarios and count what was lost or ran twice
(``chaos``), and settings for a local multi-node cluster (``nodes``).

Why here and not in tests/: the bench (bench/soak.py, bench/daemonproc.py) runs the same daemons and
scenarios, and the bench must not import tests (tests/test_layers.py checks it). Why in daemon/: it
is shipped code the layers test ranks, a face above ``daemon.service`` (it starts daemons and drives
the engine's client). It never imports tests or bench, and a daemon the bench starts runs no test
code: the handlers it names are here.
"""
