"""``python -m daemon.devnode VERB ...``: the ``casque cassandra`` CLI without the casque entry point."""

import sys

from .cli import main

sys.exit(main())
