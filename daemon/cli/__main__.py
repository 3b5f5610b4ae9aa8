"""``python -m daemon.cli``: the same as the ``casque`` script."""

import sys

from daemon.cli.main import main

sys.exit(main())
