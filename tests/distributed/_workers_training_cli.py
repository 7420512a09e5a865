"""``ddops compare`` under ``mpiexec``: the command line with the data-parallel hook.

``python _workers_training_cli.py ARGS...`` runs ``ddops.experiments.cli.main(ARGS)``
on every rank with ``ddops compare`` routed to
:func:`ddops.distributed.training.run_compare`, which is what the command line
does under an MPI launcher with more than one rank; exits with its status.
"""

from __future__ import annotations

import sys

from ddops.distributed.training import run_compare
from ddops.experiments import cli, compare

_serial = compare.run_compare


def _routed(config, log=print, **options):
    if options:  # the data-parallel run's own call of the serial experiment
        return _serial(config, log, **options)
    return run_compare(config, log)


if __name__ == "__main__":
    compare.run_compare = _routed
    sys.exit(cli.main(sys.argv[1:]))
