"""MPI-distributed Schwarz preconditioners and Krylov solvers (optional extra ``mpi``).

Nothing here is imported by ``import ddops``; this subpackage is the only
place that uses mpi4py (through :mod:`ddops.distributed.comm`), and importing
it without mpi4py raises an :class:`ImportError` naming the ``mpi`` extra.

* :mod:`~ddops.distributed.layout`: :class:`DistributedLayout`, the ownership
  of subdomains and unknowns by ranks, the ghost (halo) exchange plan and the
  distributed-vector convention (each rank holds its owned entries in
  increasing global order).
* :mod:`~ddops.distributed.matrix`: :class:`DistributedMatrix`, the product
  with ``A`` (owned rows times the owned + ghost vector).
* :mod:`~ddops.distributed.precond`: :class:`DistributedTwoLevelSchwarz`.
* :mod:`~ddops.distributed.krylov`: :func:`cg` and :func:`gmres` with scipy's
  stopping rule and global reductions by ``Allreduce``.
* :mod:`~ddops.distributed.comm`: :func:`guard`, which makes a failing rank
  stop the whole job with its message.
* :mod:`~ddops.distributed.cli`: ``mpiexec -n P ddops precond``.

Run a script with ``mpiexec -n 4 python script.py``; see the distributed page
of the documentation.
"""

from .comm import guard, launched_size, mpi, world

mpi()  # fail here, with the message naming the extra, when mpi4py is missing

from .krylov import cg, gmres  # noqa: E402
from .layout import DistributedLayout  # noqa: E402
from .matrix import DistributedMatrix  # noqa: E402
from .precond import DistributedTwoLevelSchwarz  # noqa: E402

__all__ = ["DistributedLayout", "DistributedMatrix", "DistributedTwoLevelSchwarz", "cg",
           "gmres", "guard", "launched_size", "mpi", "world"]
