"""Agreeing on a failure of the set-up: every rank raises, none waits in a collective.

The set-up of :class:`~ddops.petsc.SchwarzPC` alternates rank-local work (the
partition of the rank's rows, the factorisations of its subdomains) with
collectives.  An exception on one rank alone would leave the others waiting in
the next collective, or in the first halo exchange of the solve.  So after the
rank-local work every rank calls :func:`agree`; when any rank failed, every rank
raises: the failing rank its own exception, the others one of the same kind
(the nearest of ``TypeError``, ``ValueError``, ``MemoryError``, ``ArithmeticError``,
else ``RuntimeError``) with the failing rank's message.

The agreement is point-to-point on a tag of its own (:data:`AGREE_TAG`), not a
collective: a rank that failed *between* two collectives of
:class:`ddops.distributed.DistributedTwoLevelSchwarz` (a subdomain interior the
harmonic extension cannot factorise, say) reaches the agreement while the
others wait in that collective; a collective would then be matched against the
wrong call.  That rank waits :data:`AGREE_SECONDS` for the others and then
ends the job with ``MPI_Abort`` after printing its message: an abort with the
reason instead of a hang.  Ranks that did not fail wait without a limit (the
failing rank's message or abort always comes).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from ..distributed.comm import abort

__all__ = ["AGREE_SECONDS", "AGREE_TAG", "agree"]

#: Seconds a rank that failed waits for the others to reach the agreement before it aborts
#: the job (they are then blocked in a collective of the set-up that it left).
AGREE_SECONDS = 120.0

#: Tag of the agreement's messages (within MPI's guaranteed 32767).
AGREE_TAG = 30817

#: Exception classes re-raised on the other ranks, nearest first.
_KINDS = (TypeError, ValueError, MemoryError, ArithmeticError, RuntimeError)


def _describe(error: BaseException | None) -> tuple[str, str] | None:
    """``(kind, message)`` of ``error`` for the other ranks, None for no error."""
    if error is None:
        return None
    kind = next((k for k in _KINDS if isinstance(error, k)), RuntimeError)
    text = str(error)
    if len(text) > 2000:  # a short message stays within MPI's eager sends
        text = text[:2000] + " ..."
    return kind.__name__, f"{type(error).__name__}: {text}"


def _wait(request: Any, deadline: float | None) -> tuple[bool, Any]:
    """``(done, message)`` of a receive, polled until ``deadline`` (None: no limit)."""
    if deadline is None:
        return True, request.wait()
    while True:
        done, message = request.test()
        if done:
            return True, message
        if time.monotonic() > deadline:
            return False, None
        time.sleep(0.01)


def _abort(comm: Any, what: str, error: BaseException) -> None:
    rank, size = comm.Get_rank(), comm.Get_size()
    print(f"ddops.petsc: rank {rank} of {size} failed in {what} and the other ranks did not "
          f"reach the agreement within {AGREE_SECONDS:g} s (they wait in a collective of the "
          f"set-up); aborting: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
    abort(comm, 1)


def agree(comm: Any, error: BaseException | None, what: str) -> None:
    """Raise on every rank of ``comm`` when ``error`` is set on any (call on every rank).

    Parameters
    ----------
    comm : mpi4py communicator or None
        The set-up's communicator; None (one rank): ``error`` is raised as it is.
    error : BaseException or None
        This rank's exception, if it failed.
    what : str
        The step, for the messages (``"SchwarzPC.setUp"``).

    Raises
    ------
    Exception
        ``error`` itself on a rank that failed; on the others an exception of
        the same kind naming the lowest failing rank and its message.
    """
    if comm is None or comm.Get_size() == 1:
        if error is not None:
            raise error
        return
    rank, size = comm.Get_rank(), comm.Get_size()
    deadline = None if error is None else time.monotonic() + AGREE_SECONDS
    mine = _describe(error)
    if rank == 0:
        statuses = [mine]
        for source in range(1, size):
            done, status = _wait(comm.irecv(source=source, tag=AGREE_TAG), deadline)
            if not done:
                _abort(comm, what, error)
            statuses.append(status)
        failed = [(r, s) for r, s in enumerate(statuses) if s is not None]
        verdict = None if not failed else (failed[0][0], *failed[0][1])
        for request in [comm.isend(verdict, dest=d, tag=AGREE_TAG) for d in range(1, size)]:
            request.wait()
    else:
        verdict = None
        done, _ = _wait(comm.isend(mine, dest=0, tag=AGREE_TAG), deadline)
        if done:
            done, verdict = _wait(comm.irecv(source=0, tag=AGREE_TAG), deadline)
        if not done:
            _abort(comm, what, error)
    if error is not None:
        raise error
    if verdict is not None:
        failing, kind, message = verdict
        cls = next((k for k in _KINDS if k.__name__ == kind), RuntimeError)
        raise cls(f"{what} failed on rank {failing} of {size}: {message}")
