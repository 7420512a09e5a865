"""``ddops precond``: Krylov iterations with classical and learned Schwarz preconditioners.

``--problem poisson1d`` (the default), the 1D Poisson matrix with ``n``
elements, ``N = n / 32`` subdomains and an overlap of 2: one random
right-hand side ``b`` is solved to ``rtol`` with

* CG and no preconditioner, Jacobi, one-level and two-level additive Schwarz;
* GMRES and two-level restricted additive Schwarz (RAS);
* GMRES and Schwarz attention trained as in the paper (operator regression on
  32 Fourier modes, weighted MSE, ``lr = 1e-3``);
* CG and the learned symmetric Schwarz preconditioner
  (:mod:`ddops.precond.learned`) from a random initialisation and from
  two-level Schwarz, trained with the iteration safeguard;
* CG and pyamg's smoothed aggregation, when pyamg is installed.

The 2D/3D problems (``n`` interior grid points per direction):

* ``poisson2d``, ``poisson3d``: finite-difference Poisson;
* ``diffusion2d``: high-contrast channels along ``x`` that touch the Dirichlet
  sides (:func:`~ddops.problems.high_contrast_channels`);
* ``channels2d``: the same channels kept one cell away from the sides
  (``margin = 1``), so that they float inside the domain;
* ``lognormal2d``, ``lognormal3d``: a log-normal random coefficient
  (:func:`~ddops.problems.lognormal_field`, correlation length 0.1);
* ``inclusions3d``: random box-shaped inclusions
  (:func:`~ddops.problems.random_inclusions`, about one per 600 cells);
* ``elasticity2d``, ``elasticity3d``: P1 linear elasticity (plane strain in 2D,
  :func:`~ddops.problems.fem.fem_elasticity_2d` on the structured unit square,
  :func:`~ddops.problems.fem.fem_elasticity_3d` on
  :func:`~ddops.problems.fem.box_mesh`), clamped at ``x = 0``, homogeneous
  (``E = 1``) or, with ``contrast`` other than 1, with round stiff inclusions
  (:func:`~ddops.problems.stiff_inclusions`); rigid-body, translation or
  constant null space.

``contrast`` is the ratio of the largest to the smallest value of the
log-normal fields and the ratio of the inclusion (channel) coefficient to the
background otherwise; the random coefficients are drawn with ``seed``.  One
random right-hand side is solved with CG and no preconditioner, Jacobi,
one-level and two-level additive Schwarz (Nicolaides, GDSW, RGDSW, adaptive
GDSW or GenEO coarse spaces, or all five) on a box
(``Decomposition.from_grid``), METIS or RCB decomposition grown by ``overlap``
layers of the graph of ``A``, and pyamg's smoothed aggregation (with the null
space as near null space on elasticity) and classical (Ruge-Stuben) AMG.  The
adaptive coarse spaces take ``threshold`` and the caps on their eigenvectors;
AGDSW and GenEO use the finite-element Neumann matrices of the subdomains on
the elasticity problems and the algebraic ones of :mod:`ddops.dd.adaptive`
otherwise.  Every row reports its set-up split into partition, overlap, local
factorisation, coarse space (of which the eigenproblems of the adaptive
spaces) and coarse factorisation, its solve time and its peak memory (see
:data:`~ddops.experiments.precond.runners.MEMORY_METHOD`); a row whose set-up
refuses the matrix (a ValueError: GenEO on a matrix that is not diagonally
dominant, a singular coarse matrix) is reported as
refused, and a pyamg row that fails as failed, each with its reason, and the other rows
still run (``ddops precond`` then exits with status 4).

``--matrix FILE`` runs the same rows on a user's matrix (Matrix Market ``.mtx``, scipy
``.npz`` or dense ``.npy``; :mod:`ddops.problems.files`) with a METIS (or, with
``--coordinates``, RCB) decomposition: ``--rhs`` (default: random), ``--coordinates``
(one row per node or per unknown), ``--block-size`` (unknowns per node, interleaved),
``--null-space constants|rigid|FILE`` (``rigid``: the rigid body modes of the
coordinates) and ``--kernel constants|FILE`` for a singular matrix (the right-hand side
is then projected off the kernel, and the Schwarz rows get ``kernel=``).  The matrix is
checked once, before any row (finite, symmetric to rounding, a positive diagonal, and,
without ``--kernel``, not annihilating the constants or the null space); a matrix whose
rows come in groups of 2 or 3 coupling the same nodes, given without ``--block-size``,
gets a one-line hint (:func:`~ddops.experiments.precond.matrix_files.block_structure`).

It prints and writes ``<prefix>_table.md``, ``<prefix>_results.json``, a
residual-history plot ``<prefix>_residuals.png`` and, when some methods need
many more iterations than others, ``<prefix>_residuals_zoom.png`` with the
fast ones only.

The package's modules, by concept:

* :mod:`~ddops.experiments.precond.config`: :class:`PrecondConfig`, its checks and
  the choices of the flags;
* :mod:`~ddops.experiments.precond.problem_registry`: the built-in problems, how
  each is built and decomposed;
* :mod:`~ddops.experiments.precond.matrix_files`: ``--matrix`` and the files that
  go with it;
* :mod:`~ddops.experiments.precond.runners`: the rows (set-up, solve, timings,
  memory, refused and failed rows) and :func:`run_precond`;
* :mod:`~ddops.experiments.precond.report`: the tables, the JSON file and the plots;
* :mod:`~ddops.experiments.precond.command_line`: the flags (:func:`add_arguments`,
  :func:`run_from_args`).

Every public name of these modules is importable from ``ddops.experiments.precond``.
"""

from __future__ import annotations

from .command_line import add_arguments, run_from_args
from .config import (  # noqa: F401 - the public names of the modules, re-exported
    ADAPTIVE_COARSE_SPACES,
    BUILT_COARSE,
    COARSE_CHOICES,
    COARSE_SPACES,
    DEFAULT_EXTRA,
    DEFAULT_THRESHOLDS,
    EXTENSION_SOLVER_CHOICES,
    FACTOR_DTYPES,
    LEARNED_ROWS,
    LOCAL_SOLVER_CHOICES,
    MATRIX_OPTIONS,
    NULL_SPACES,
    ONE_D_ONLY,
    PARTITIONER_CHOICES,
    PrecondConfig,
    coarse_list,
    paper_config,
)
from .matrix_files import (  # noqa: F401
    KERNEL_HINT,
    MATRIX_KERNELS,
    MATRIX_NULL_SPACES,
    block_structure,
    read_matrix_files,
)
from .problem_registry import (  # noqa: F401
    BOX_COUNT_SLACK,
    CELLS_PER_INCLUSION,
    CHANNEL_MARGIN,
    DEFAULT_CONTRAST,
    DEFAULT_CONTRASTS,
    DEFAULT_N,
    DIMENSIONS,
    ELASTICITY,
    GRID_ASPECT,
    LOGNORMAL_CORRELATION,
    PROBLEM_SUBDOMAIN_WIDTH,
    PROBLEMS,
    STIFF_INCLUSIONS,
    SUBDOMAIN_WIDTH,
    Problem,
    box_count_near,
    box_grid,
    build_problem,
    decompose,
)
from .report import (  # noqa: F401
    OUTPUT_SUFFIXES,
    PLOT_DPI,
    ZOOM_ITERATIONS,
    format_iterations,
    machine_info,
    markdown_table,
    markdown_table_nd,
    write_outputs,
)
from .runners import (  # noqa: F401
    COARSE_LABELS,
    MEMORY_METHOD,
    METHODS,
    ND_METHODS,
    SUPERLU_BYTES_PER_NONZERO,
    UNTRAINED_PAPER_LABEL,
    run_precond,
)

__all__ = ["PrecondConfig", "METHODS", "ND_METHODS", "PROBLEMS", "COARSE_SPACES",
           "ADAPTIVE_COARSE_SPACES", "COARSE_CHOICES", "PARTITIONER_CHOICES", "NULL_SPACES",
           "FACTOR_DTYPES", "MEMORY_METHOD", "box_grid", "block_structure", "add_arguments",
           "run_from_args", "run_precond"]
