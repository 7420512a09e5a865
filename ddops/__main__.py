"""``python -m ddops``: the same as the ``ddops`` console command."""

import sys

from .experiments.cli import main

sys.exit(main())
