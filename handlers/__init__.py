"""Handler classes. ``builtin`` ships generally useful ones; ``examples`` is what the demo runs.

Add your own here or in any importable module, and name the module in ``worker.handler_modules``.
"""
