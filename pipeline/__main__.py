"""``python -m pipeline <job>``, and the script spark-submit runs (``casque pipeline entry`` prints
its path): the same jobs as ``casque pipeline <job>``."""

import sys
from pathlib import Path

if not __package__:  # run as a file (spark-submit): make the package importable from a source tree too
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
