"""``ddops precond`` flags parsed by the real parser, run by ddops.distributed.cli on every rank.

Exits like the command line: a ValueError/TypeError prints one line and exits 2.
"""

from __future__ import annotations

import sys

from ddops.distributed.cli import run_precond
from ddops.experiments.cli import build_parser

args = build_parser().parse_args(["precond", *sys.argv[1:]])
try:
    run_precond(args)
except (ValueError, TypeError) as exc:
    print(f"ddops precond: error: {exc}", file=sys.stderr)
    sys.exit(2)
