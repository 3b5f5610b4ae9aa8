"""``python -m daemon.devnode VERB ...``: ``casque cassandra VERB ...`` without the entry point."""

import sys

from .cli import main

sys.exit(main())
