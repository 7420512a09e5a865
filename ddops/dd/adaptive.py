"""Adaptive spectral coarse spaces: AGDSW and GenEO, built from an assembled sparse matrix.

Both enrich a classical coarse space with the eigenvectors of many small
generalized eigenproblems whose eigenvalues fall below a threshold ``tau``.
The eigenvalues measure how much cheaper a function is in a local
*Neumann* energy (the energy of a neighbourhood with free values on its
boundary) than in the energy the classical method charges for it; the
functions that are much cheaper are the ones a classical coarse space misses
(a value per high-coefficient channel or inclusion crossing an interface),
and the ones that make iteration counts grow with the contrast.

The two spaces live in their own modules, :mod:`ddops.dd.agdsw` (AGDSW, on the components
of the interface of a non-overlapping partition) and :mod:`ddops.dd.geneo` (GenEO, on the
overlapping subdomains), and share :mod:`ddops.dd.eigen` (the local Neumann matrices, the
small generalized eigenproblems, :class:`~ddops.dd.eigen.AdaptiveInfo`).  This module keeps
the notes common to both and re-exports their public names, so that
``ddops.dd.adaptive.agdsw_basis`` and the rest stay where they were.

Null spaces
-----------
A given null space ``Z`` enters first: AGDSW keeps GDSW's pieces ``Z`` on
every component, GenEO the Nicolaides functions ``R_i^T D_i R_i Z``; the
eigenvectors follow.  Functions that are (numerically) combinations of the
earlier ones of the same component or subdomain are dropped there (the
Gram-Schmidt of :func:`ddops.dd.gdsw.gdsw_basis`) and counted in ``stats``.
"""

from __future__ import annotations

from . import agdsw, eigen, geneo
from .agdsw import agdsw_basis
from .eigen import AdaptiveInfo, local_neumann_matrices, size_groups
from .geneo import geneo_basis

__all__ = [
    "ADAPTIVE_COARSE_BASES",
    "AGDSW_THRESHOLD",
    "GENEO_THRESHOLD",
    "MAX_PER_COMPONENT",
    "MAX_PER_SUBDOMAIN",
    "AdaptiveInfo",
    "agdsw_basis",
    "geneo_basis",
    "local_neumann_matrices",
    "size_groups",
    "GENEO_INITIAL_VECTORS",
    "GENEO_EXTRA_VECTORS",
    "GENEO_MAX_ITERATIONS",
    "GENEO_SHIFT",
    "GENEO_FILTER_DEGREE",
    "GENEO_FILTER_CAP",
    "GENEO_RESIDUAL_RTOL",
    "GENEO_BOUNDARY_RTOL",
    "EIGEN_DEPENDENCE_RTOL",
    "NEUMANN_SHIFT",
]

#: Names of the adaptive coarse spaces.
ADAPTIVE_COARSE_BASES = ("agdsw", "geneo")

# The constants below are defined (and read) in the modules named; the values here are
# copies for reading, so changing them here changes nothing.

#: Default AGDSW threshold: :data:`ddops.dd.agdsw.AGDSW_THRESHOLD`.
AGDSW_THRESHOLD = agdsw.AGDSW_THRESHOLD

#: Default GenEO threshold: :data:`ddops.dd.geneo.GENEO_THRESHOLD`.
GENEO_THRESHOLD = geneo.GENEO_THRESHOLD

#: Default cap per interface component (AGDSW): :data:`ddops.dd.agdsw.MAX_PER_COMPONENT`.
MAX_PER_COMPONENT = agdsw.MAX_PER_COMPONENT

#: Default cap per subdomain (GenEO): :data:`ddops.dd.geneo.MAX_PER_SUBDOMAIN`.
MAX_PER_SUBDOMAIN = geneo.MAX_PER_SUBDOMAIN

#: :data:`ddops.dd.geneo.GENEO_INITIAL_VECTORS`.
GENEO_INITIAL_VECTORS = geneo.GENEO_INITIAL_VECTORS

#: :data:`ddops.dd.geneo.GENEO_EXTRA_VECTORS`.
GENEO_EXTRA_VECTORS = geneo.GENEO_EXTRA_VECTORS

#: :data:`ddops.dd.geneo.GENEO_MAX_ITERATIONS`.
GENEO_MAX_ITERATIONS = geneo.GENEO_MAX_ITERATIONS

#: :data:`ddops.dd.geneo.GENEO_SHIFT`.
GENEO_SHIFT = geneo.GENEO_SHIFT

#: :data:`ddops.dd.geneo.GENEO_FILTER_DEGREE`.
GENEO_FILTER_DEGREE = geneo.GENEO_FILTER_DEGREE

#: :data:`ddops.dd.geneo.GENEO_FILTER_CAP`.
GENEO_FILTER_CAP = geneo.GENEO_FILTER_CAP

#: :data:`ddops.dd.geneo.GENEO_RESIDUAL_RTOL`.
GENEO_RESIDUAL_RTOL = geneo.GENEO_RESIDUAL_RTOL

#: :data:`ddops.dd.geneo.GENEO_BOUNDARY_RTOL`.
GENEO_BOUNDARY_RTOL = geneo.GENEO_BOUNDARY_RTOL

#: :data:`ddops.dd.eigen.EIGEN_DEPENDENCE_RTOL`.
EIGEN_DEPENDENCE_RTOL = eigen.EIGEN_DEPENDENCE_RTOL

#: :data:`ddops.dd.agdsw.NEUMANN_SHIFT`.
NEUMANN_SHIFT = agdsw.NEUMANN_SHIFT
