"""What the JSON workers of this folder share.  A worker runs as ``mpiexec -n P python
WORKER --out FILE``: :func:`worker_main` runs its ``run(comm)`` on every rank under
:func:`ddops.distributed.guard` (a rank that raises ends the job instead of leaving the
others waiting), and rank 0 writes the result as JSON.  The workers import this as a
sibling module (their folder is the script's first path entry)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from ddops.distributed import guard, world


def worker_main(run: Callable[[Any], Any]) -> None:
    """Parse ``--out``, run ``run(comm)`` on every rank, write rank 0's result there."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    comm = world()
    with guard(comm):
        out = run(comm)
        if comm.Get_rank() == 0:
            with open(args.out, "w") as fh:
                json.dump(out, fh, indent=1)


def count_iterations(solver: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[int, int]:
    """``solver(*args, callback=..., **kwargs)`` (scipy's or ddops' CG): its ``info`` and
    the number of callbacks, one per iteration."""
    calls = [0]

    def callback(_):
        calls[0] += 1

    _, info = solver(*args, callback=callback, **kwargs)
    return int(info), calls[0]
