"""Non-overlapping partitions of the unknowns of a sparse matrix, and overlap growth.

An algebraic overlapping decomposition is built in two steps:

1. :func:`partition` labels every unknown with the part that owns it, by METIS
   on the graph of the matrix, by recursive coordinate bisection, or from labels
   the user gives;
2. :func:`grow_overlap` adds ``overlap`` layers of the graph to every part at
   once: the Boolean membership matrix (one row per part) is multiplied by the
   pattern of the matrix plus the identity, one sparse product per layer.

:func:`decomposition_from_matrix` chains both and returns a
:class:`~ddops.dd.decomposition.Decomposition`; :func:`decomposition_from_grid`
does the same for box partitions of structured 2D/3D grids.

The graph of ``A`` is its stored sparsity structure without the diagonal
(explicit zeros count as edges; call ``A.eliminate_zeros()`` first to drop
them).  With ``block_size = b`` the unknowns are interleaved by node (node
``k`` holds unknowns ``k b, ..., k b + b - 1``, as in vector problems such as
elasticity) and every step works on the node graph, in which two nodes are
adjacent when any of their unknowns are coupled; a node's unknowns always stay
together.

The code is in two places, by what it returns: the algorithms on index arrays (labels,
packed subdomains) in ``ddops.dd._partitioning``, below the decompositions, and the three
``decomposition_from_*`` builders in :mod:`ddops.dd.decomposition`, next to the class whose
``from_matrix`` and ``from_grid`` call them.  This module is the public home of both.
"""

from . import _partitioning
from ._partitioning import (
    default_subdomains,
    grid_graph,
    grid_partition,
    grow_overlap,
    partition,
)
from .decomposition import (
    decomposition_from_grid,
    decomposition_from_labels,
    decomposition_from_matrix,
)

__all__ = [
    "PARTITIONERS",
    "TARGET_SUBDOMAIN_UNKNOWNS",
    "decomposition_from_grid",
    "default_subdomains",
    "decomposition_from_labels",
    "decomposition_from_matrix",
    "grid_graph",
    "grid_partition",
    "grow_overlap",
    "partition",
]

#: Names accepted by the ``partitioner`` argument (an integer label array is accepted too).
PARTITIONERS = _partitioning.PARTITIONERS

#: Unknowns per non-overlapping part that :func:`default_subdomains` aims at: the total
#: time (set-up and CG) of the GDSW preconditioner with exact local solves was within 10%
#: of its best from about 1000 to 4000 unknowns per part on 2D and 3D Poisson and 3D
#: elasticity (see "Local solvers and subdomain size" in the preconditioning guide).
TARGET_SUBDOMAIN_UNKNOWNS = _partitioning.TARGET_SUBDOMAIN_UNKNOWNS
