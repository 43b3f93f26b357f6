"""``python -m mmobs.cli``: the ``mmobs`` command, where its console script is not installed."""

import sys

from mmobs.cli import main

sys.exit(main())
