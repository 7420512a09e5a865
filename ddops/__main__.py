"""``python -m ddops``: the same as the ``ddops`` console command."""

import sys

from .cli import main

sys.exit(main())
