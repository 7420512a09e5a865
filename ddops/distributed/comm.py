"""The MPI entry point of :mod:`ddops.distributed`: importing mpi4py, stopping all ranks on error.

This module is the only place that imports :mod:`mpi4py`.  :func:`mpi` returns
the ``MPI`` namespace or raises an :class:`ImportError` that names the
``mpi`` extra.  :func:`guard` turns an exception on one rank into a clean
stop of the whole job: without it, the other ranks would wait forever in their
next collective call.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from collections.abc import Iterator
from typing import Any

__all__ = ["ABORT_GRACE_SECONDS", "MPI_SIZE_VARIABLES", "mpi", "world", "launched_size", "guard",
           "abort"]

#: Environment variables that MPI launchers set to the number of ranks (MPICH/Hydra, Intel
#: MPI and Slurm's PMI: ``PMI_SIZE``; Open MPI: ``OMPI_COMM_WORLD_SIZE``).  ``SLURM_NTASKS``
#: is not used: it is also set for job steps that are not MPI programs.
MPI_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")

#: Seconds between a rank's last message and its ``MPI_Abort``.  The launcher forwards the
#: ranks' output asynchronously, and an abort kills the processes (and with them the output
#: not yet forwarded): under load, Hydra dropped the one line that says why the job ended.
ABORT_GRACE_SECONDS = 1.0


def mpi() -> Any:
    """The ``mpi4py.MPI`` module, imported on first use.

    Raises
    ------
    ImportError
        mpi4py is not installed; the message names the ``mpi`` extra.
    """
    try:
        from mpi4py import MPI
    except ImportError as exc:  # pragma: no cover - exercised without mpi4py only
        raise ImportError(
            "ddops.distributed needs mpi4py and an MPI library: install the 'mpi' extra, "
            "pip install 'ddops[mpi]' (mpi4py and the mpich wheel, which ships mpiexec)"
        ) from exc
    return MPI


def world() -> Any:
    """``MPI.COMM_WORLD``."""
    return mpi().COMM_WORLD


def launched_size() -> int:
    """Number of ranks announced by the MPI launcher's environment (1 when not under one).

    Read without importing mpi4py, so that a command line can decide whether
    to take the distributed path before MPI is initialised.
    """
    for name in MPI_SIZE_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


@contextlib.contextmanager
def guard(comm: Any = None, *, exit_code: int = 1) -> Iterator[None]:
    """Stop every rank when the body raises on any one of them.

    The exception is printed to stderr prefixed with the rank (the full
    traceback when ``DDOPS_MPI_TRACEBACK`` is set, otherwise one line), then
    ``comm.Abort(exit_code)`` ends the whole job: ``mpiexec`` returns non-zero
    instead of the other ranks hanging in their next collective.
    ``SystemExit`` with code 0 (or None) passes through.

    Parameters
    ----------
    comm : mpi4py communicator, optional
        Communicator to abort (default ``MPI.COMM_WORLD``).
    exit_code : int
        Exit status passed to ``Abort``.

    Examples
    --------
    >>> from ddops.distributed import guard
    >>> with guard():  # doctest: +SKIP
    ...     run_the_solver()
    """
    comm = world() if comm is None else comm
    try:
        yield
    except SystemExit as exc:
        if exc.code in (0, None):
            raise
        _abort(comm, f"exit status {exc.code}", exc, exit_code)
    except BaseException as exc:  # noqa: BLE001 - every failure must stop the job
        _abort(comm, f"{type(exc).__name__}: {exc}", exc, exit_code)


def _abort(comm: Any, message: str, exc: BaseException, exit_code: int) -> None:
    rank = comm.Get_rank()
    if os.environ.get("DDOPS_MPI_TRACEBACK"):
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    print(f"ddops: rank {rank} of {comm.Get_size()} failed: {message}", file=sys.stderr,
          flush=True)
    abort(comm, exit_code)


def abort(comm: Any, exit_code: int) -> None:
    """End the whole job with ``exit_code`` once this rank's output has left it.

    Flushes this process's standard streams, waits :data:`ABORT_GRACE_SECONDS`
    for the launcher to forward them, then calls ``comm.Abort(exit_code)``; the
    process exits with ``exit_code`` if the abort returns before the launcher
    has ended it.  Never returns.

    Parameters
    ----------
    comm : mpi4py communicator
        Communicator to abort.
    exit_code : int
        Exit status of the job.
    """
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()
    time.sleep(ABORT_GRACE_SECONDS)
    comm.Abort(exit_code)
    os._exit(exit_code)
