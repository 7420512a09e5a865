"""ddops: sparse linear-algebra operators built from overlapping domain decomposition."""

from . import problems, testing
from .backend import cupy_available, get_array_module
from .dd.coarse import coarse_basis
from .dd.decomposition import Decomposition, Decomposition1D
from .learning.data import FourierRHS, GridFourierRHS, MatrixRHS, make_rhs_sampler
from .learning.spectral import best_rank_error
from .learning.training import Trainer, TrainingConfig
from .operators import GlobalLowRankOperator, SchwarzOperator
from .precond.learned_coarse import learned_coarse_basis
from .precond.options import AGDSWOptions, GDSWOptions, GenEOOptions, SchwarzOptions
from .precond.schwarz import TwoLevelSchwarz
from .problems import poisson_2d, poisson_3d, rigid_body_modes
from .problems.poisson1d import PoissonSolver, poisson_1d

__version__ = "0.1.0"

__all__ = [
    "AGDSWOptions",
    "Decomposition",
    "Decomposition1D",
    "FourierRHS",
    "GDSWOptions",
    "GenEOOptions",
    "GlobalLowRankOperator",
    "GridFourierRHS",
    "MatrixRHS",
    "PoissonSolver",
    "SchwarzOperator",
    "SchwarzOptions",
    "Trainer",
    "TrainingConfig",
    "TwoLevelSchwarz",
    "best_rank_error",
    "coarse_basis",
    "cupy_available",
    "get_array_module",
    "learned_coarse_basis",
    "make_rhs_sampler",
    "poisson_1d",
    "poisson_2d",
    "poisson_3d",
    "problems",
    "rigid_body_modes",
    "testing",
]
