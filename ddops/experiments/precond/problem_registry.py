"""The problems of ``ddops precond``: which exist, how each is built and decomposed.

:data:`PROBLEMS` names the built-in problems; :func:`build_problem` builds the matrix
of a validated :class:`~ddops.experiments.precond.config.PrecondConfig` (a built-in
problem or the files of ``--matrix``, read by
:func:`~ddops.experiments.precond.matrix_files.read_matrix_files`) as a
:class:`Problem`, and :func:`decompose` its overlapping decomposition, with the
partition and the overlap timed separately.  The problem's defaults (size,
subdomain width, contrast) live here too; the configuration checks them.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...dd.decomposition import Decomposition
from .matrix_files import read_matrix_files

if TYPE_CHECKING:
    from .config import PrecondConfig

__all__ = ["PROBLEMS", "DIMENSIONS", "ELASTICITY", "DEFAULT_N", "SUBDOMAIN_WIDTH",
           "PROBLEM_SUBDOMAIN_WIDTH", "DEFAULT_CONTRAST", "DEFAULT_CONTRASTS", "CHANNEL_MARGIN",
           "LOGNORMAL_CORRELATION", "CELLS_PER_INCLUSION", "STIFF_INCLUSIONS", "GRID_ASPECT",
           "box_grid", "box_count_near", "BOX_COUNT_SLACK", "Problem", "build_problem",
           "decompose"]

#: Problems of ``--problem``.
PROBLEMS = ("poisson1d", "poisson2d", "poisson3d", "diffusion2d", "channels2d", "lognormal2d",
            "lognormal3d", "inclusions3d", "elasticity2d", "elasticity3d")

#: Space dimension of each problem.
DIMENSIONS = {"poisson1d": 1, "poisson2d": 2, "poisson3d": 3, "diffusion2d": 2,
              "channels2d": 2, "lognormal2d": 2, "lognormal3d": 3, "inclusions3d": 3,
              "elasticity2d": 2, "elasticity3d": 3}

#: The finite-element elasticity problems (scikit-fem; METIS or RCB partitions).
ELASTICITY = ("elasticity2d", "elasticity3d")

#: Default ``n`` of each problem: 1D elements, otherwise interior points per direction.
DEFAULT_N = {"poisson1d": 1024, "poisson2d": 128, "poisson3d": 20, "diffusion2d": 128,
             "channels2d": 96, "lognormal2d": 128, "lognormal3d": 20, "inclusions3d": 20,
             "elasticity2d": 64, "elasticity3d": 11}

#: Subdomain width in points per direction (about 32 x 32 in 2D, 10 x 10 x 10 in 3D) of the
#: structured subdomains named in the help text; the default number of subdomains of the
#: problems without a :data:`PROBLEM_SUBDOMAIN_WIDTH` is
#: :func:`ddops.dd.partition.default_subdomains` of the number of unknowns.
SUBDOMAIN_WIDTH = {2: 32, 3: 10}

#: Problems whose default subdomains are narrower than :data:`SUBDOMAIN_WIDTH`: the
#: high-contrast problems made for the adaptive coarse spaces, whose local eigenproblems
#: grow with the subdomains (``channels2d``: 36 subdomains of 16 x 16 points at ``n = 96``;
#: ``lognormal2d``: 64 at ``n = 128``; ``lognormal3d`` and ``inclusions3d``: 27 of about 7^3
#: at ``n = 20``; ``elasticity3d``: 8 at ``n = 11``).
PROBLEM_SUBDOMAIN_WIDTH = {"channels2d": 16, "lognormal2d": 16, "lognormal3d": 6,
                           "inclusions3d": 6, "elasticity3d": 5}

#: Default contrast of ``--problem diffusion2d``.
DEFAULT_CONTRAST = 1e6

#: Default ``--contrast`` of the problems with a heterogeneous coefficient: the channel or
#: inclusion coefficient over the background, the ratio max/min of the log-normal fields.
#: The elasticity problems are homogeneous unless ``--contrast`` is given.
DEFAULT_CONTRASTS = {"diffusion2d": DEFAULT_CONTRAST, "channels2d": 1e6, "lognormal2d": 1e4,
                     "lognormal3d": 1e4, "inclusions3d": 1e6}

#: Cells at each end in ``x`` of the channels of ``channels2d`` left at the background value.
CHANNEL_MARGIN = 1

#: Correlation length of the log-normal fields, in units of the domain's side.
LOGNORMAL_CORRELATION = 0.1

#: ``inclusions3d``: one box of 3 x 3 x 8 cells per this many cells (about 12% of the volume).
CELLS_PER_INCLUSION = 600

#: Stiff inclusions of the elasticity problems with ``--contrast``: ``(count, radius)`` per
#: space dimension (:func:`~ddops.problems.stiff_inclusions`; about 36% of the triangles in
#: 2D, 9% of the tetrahedra in 3D, whatever ``n``).
STIFF_INCLUSIONS = {2: (60, 0.05), 3: (8, 0.15)}

#: Largest ratio of box counts between two directions that the default box grid accepts;
#: otherwise the finite-difference problems fall back to METIS.
GRID_ASPECT = 2


def box_grid(subdomains: int, dim: int, points: int) -> tuple[int, ...] | None:
    """The most nearly square (cubic) grid of ``subdomains`` boxes, or None.

    Parameters
    ----------
    subdomains : int
        Number of boxes ``N``.
    dim : {2, 3}
        Space dimension.
    points : int
        Grid points per direction; no direction gets more boxes than points.

    Returns
    -------
    tuple of int or None
        Boxes per direction, non-increasing (x first), whose product is ``N`` and
        whose largest and smallest entries differ by at most a factor
        :data:`GRID_ASPECT`; None when no such grid exists (for example a prime ``N``
        above ``GRID_ASPECT``).
    """
    def splits(total: int, k: int, most: int):
        if k == 1:
            if total <= most:
                yield (total,)
            return
        for f in range(min(total, most), 0, -1):
            if total % f == 0:
                for rest in splits(total // f, k - 1, f):
                    yield (f, *rest)

    best = min(splits(subdomains, dim, min(points, subdomains)),
               key=lambda parts: parts[0] / parts[-1], default=None)
    if best is None or best[0] > GRID_ASPECT * best[-1]:
        return None
    return best


#: The default number of subdomains of a finite-difference problem (parts of about
#: :data:`~ddops.dd.partition.TARGET_SUBDOMAIN_UNKNOWNS` unknowns) moves by up to this
#: factor to a count that makes a grid of boxes (:func:`box_count_near`): boxes cost
#: nothing to find where METIS takes a tenth of the set-up.  Measured on 3D Poisson 50^3
#: (one thread, GDSW): 62 METIS parts, set-up 0.98 s (partition 0.15 s), 41 CG iterations,
#: set-up + solve 1.65 s; 64 boxes 0.63 s, 39 iterations, 1.22 s.
BOX_COUNT_SLACK = 1.25


def box_count_near(target: int, dim: int, points: int) -> int:
    """``target`` if it has a grid of boxes, else the nearest count that has one.

    Parameters
    ----------
    target : int
        The wanted number of subdomains.
    dim : {2, 3}
        Space dimension.
    points : int
        Grid points per direction.

    Returns
    -------
    int
        ``target`` when :func:`box_grid` finds boxes for it; otherwise, of the counts
        within a factor :data:`BOX_COUNT_SLACK` of it that have boxes, the nearest by
        ratio (the smaller on a tie); ``target`` when there is none.
    """
    if box_grid(target, dim, points) is not None:
        return target
    low = max(2, math.ceil(target / BOX_COUNT_SLACK))
    high = math.floor(target * BOX_COUNT_SLACK)
    found = [k for k in range(low, high + 1) if box_grid(k, dim, points) is not None]
    if not found:
        return target
    return min(found, key=lambda k: (abs(math.log(k / target)), k))


@dataclass
class Problem:
    """A 2D/3D problem of ``ddops precond``: the matrix and what the decompositions need.

    Attributes
    ----------
    A : sparse matrix
        The matrix.
    coordinates : ndarray
        One row per node (per unknown when ``block_size`` is 1); None for a user's
        matrix without ``--coordinates``.
    block_size : int
        Unknowns per node, interleaved.
    null_space : ndarray or None
        The null space of the coarse spaces and of pyamg's aggregation (None: the
        constants).
    grid_shape : tuple of int or None
        Points per direction of the grid problems (None: no grid).
    description : str
        The problem in words (the table's title, the JSON file's ``problem``).
    neumann : callable, optional
        The finite-element Neumann matrices of a decomposition's subdomains
        (elasticity; GenEO takes them).
    rhs : ndarray, optional
        The right-hand side (None: a random one).
    kernel : ndarray, optional
        The kernel of a singular matrix (``--kernel``).
    """

    A: Any
    coordinates: np.ndarray  # one row per node (per unknown when block_size is 1)
    block_size: int
    null_space: np.ndarray | None  # None: the constants
    grid_shape: tuple[int, ...] | None  # points per direction of the grid problems
    description: str
    # the finite-element Neumann matrices of a decomposition's subdomains (elasticity)
    neumann: Callable[[Decomposition], list] | None = None
    rhs: np.ndarray | None = None  # None: a random one
    kernel: np.ndarray | None = None  # the kernel of a singular matrix


def _inclusion_count(n: int, dim: int = 3) -> int:
    """Boxes of ``inclusions3d``: one per :data:`CELLS_PER_INCLUSION` cells, at least one."""
    return max(1, round((n + 1) ** dim / CELLS_PER_INCLUSION))


def _elasticity_problem(c: PrecondConfig, dim: int) -> Problem:
    from ... import problems
    from ...problems import fem

    mesh = fem.unit_square_mesh(c.n) if dim == 2 else fem.box_mesh(c.n)
    assemble = fem.fem_elasticity_2d if dim == 2 else fem.fem_elasticity_3d
    if c.contrast is None or c.contrast == 1:
        E: Any = 1.0
        material = "E = 1"
    else:
        count, radius = STIFF_INCLUSIONS[dim]
        E = problems.stiff_inclusions(fem.element_centroids(mesh), count=count, radius=radius,
                                      contrast=c.contrast, seed=c.seed)
        material = (f"{count} stiff inclusions of radius {radius:.3g}, E = {c.contrast:g} "
                    f"in them and 1 outside, {np.mean(E != 1.0):.1%} of the elements")
    A, X = assemble(mesh=mesh, E=E)
    Z = problems.rigid_body_modes(X)
    Z = {"rbm": Z, "translations": Z[:, :dim], "constants": None}[c.null_space]

    def neumann(d: Decomposition) -> list:
        return fem.fem_elasticity_neumann(mesh, d, E=E)

    kind = "plane-strain elasticity" if dim == 2 else "elasticity on tetrahedra"
    where = "x = 0" if dim == 2 else "the face x = 0"
    return Problem(A, X, dim, Z, None,
                   f"P1 {kind} ({material}, nu = 0.3, clamped at {where}) on the structured "
                   f"mesh with {c.n} interior points per direction, null space {c.null_space}",
                   neumann)


def _user_problem(c: PrecondConfig) -> Problem:
    """The problem of ``matrix=FILE`` (files read by :func:`read_matrix_files`)."""
    f = read_matrix_files(c)
    A, b = f["A"], c.block_size
    parts = [f"the matrix of {os.path.basename(c.matrix)}"]
    if b > 1:
        parts.append(f"block size {b}")
    parts.append(f"null space {c.null_space or 'constants'}")
    if c.kernel is not None:
        parts.append(f"kernel {c.kernel} ({f['K'].shape[1]} vectors)")
    parts.append(f"right-hand side {'from ' + os.path.basename(c.rhs) if c.rhs else 'random'}")
    return Problem(A, f["X"], b, f["Z"], None, ", ".join(parts), rhs=f["rhs"], kernel=f["K"])


def build_problem(c: PrecondConfig) -> Problem:
    """The 2D/3D problem (or the user's matrix) of a configuration.

    Parameters
    ----------
    c : PrecondConfig
        Validated settings (:meth:`PrecondConfig.validated
        <ddops.experiments.precond.config.PrecondConfig.validated>`) of a problem other
        than ``poisson1d``: ``problem``, ``n``, ``contrast``, ``null_space`` and ``seed``
        or, with ``problem="matrix"``, the files (read during validation and reused).

    Returns
    -------
    Problem
        The matrix, its coordinates, block size, null space and description.
    """
    from ... import problems

    if c.problem == "matrix":
        return _user_problem(c)
    dim = DIMENSIONS[c.problem]
    if c.problem in ELASTICITY:
        return _elasticity_problem(c, dim)
    if c.problem == "diffusion2d":
        coefficient = problems.high_contrast_channels(c.n, c.contrast)
        what = f"high-contrast diffusion (contrast {c.contrast:g}, channels along x)"
    elif c.problem == "channels2d":
        coefficient = problems.high_contrast_channels(c.n, c.contrast, margin=CHANNEL_MARGIN)
        what = (f"high-contrast diffusion (contrast {c.contrast:g}, floating channels along x, "
                f"{CHANNEL_MARGIN} background cell at each end)")
    elif c.problem in ("lognormal2d", "lognormal3d"):
        coefficient = problems.lognormal_field(c.n, dim=dim,
                                               correlation_length=LOGNORMAL_CORRELATION,
                                               contrast=c.contrast, seed=c.seed)
        what = (f"{dim}D diffusion with a log-normal coefficient (contrast {c.contrast:g}, "
                f"correlation length {LOGNORMAL_CORRELATION:g}, seed {c.seed})")
    elif c.problem == "inclusions3d":
        count = _inclusion_count(c.n)
        coefficient = problems.random_inclusions(c.n, dim=3, count=count, contrast=c.contrast,
                                                 seed=c.seed)
        what = (f"3D diffusion with {count} random 3 x 3 x 8-cell inclusions (contrast "
                f"{c.contrast:g}, {np.mean(coefficient != 1.0):.1%} of the "
                f"cells, seed {c.seed})")
    else:
        build = problems.poisson_2d if dim == 2 else problems.poisson_3d
        A, X = build(c.n, return_coordinates=True)
        return Problem(A, X, 1, None, (c.n,) * dim,
                       f"{dim}D Poisson (finite differences), {c.n}^{dim} interior points")
    diffusion = problems.diffusion_2d if dim == 2 else problems.diffusion_3d
    A, X = diffusion(coefficient, return_coordinates=True)
    return Problem(A, X, 1, None, (c.n,) * dim, f"{what}, {c.n}^{dim} interior points")


def decompose(c: PrecondConfig, prob: Problem) -> tuple[Decomposition, float, float]:
    """The overlapping decomposition, with the seconds of the partition and of the overlap.

    The two steps of :meth:`Decomposition.from_grid` / :meth:`Decomposition.from_matrix`,
    timed separately: :func:`~ddops.dd.partition.grid_partition` or
    :func:`~ddops.dd.partition.partition`, then :func:`~ddops.dd.partition.grow_overlap`
    (the overlap time includes packing the subdomains into the decomposition).

    Parameters
    ----------
    c : PrecondConfig
        Validated settings: ``partitioner``, ``subdomains``, ``overlap``, ``n`` and
        ``seed``.
    prob : Problem
        The problem (:func:`build_problem`).

    Returns
    -------
    d : Decomposition
        The overlapping decomposition.
    partition_seconds, overlap_seconds : float
        The seconds of the partition and of the overlap.
    """
    from ...dd.partition import decomposition_from_labels, grid_partition, grow_overlap, partition

    A, b = prob.A, prob.block_size
    start = time.perf_counter()
    if c.partitioner == "grid":
        parts = box_grid(c.subdomains, len(prob.grid_shape), c.n)
        owner = grid_partition(prob.grid_shape, parts)
    else:
        owner = partition(A, c.subdomains, partitioner=c.partitioner,
                          coordinates=prob.coordinates, block_size=b, seed=c.seed)
    partition_seconds = time.perf_counter() - start
    start = time.perf_counter()
    indices, sizes = grow_overlap(A, owner, c.overlap, block_size=b)
    points = (None if prob.coordinates is None else prob.coordinates if b == 1
              else np.repeat(prob.coordinates, b, axis=0))
    h = 1.0 / (c.n + 1) if prob.grid_shape is not None else None
    d = decomposition_from_labels(indices, sizes, owner, coordinates=points, h=h, block_size=b)
    return d, partition_seconds, time.perf_counter() - start
