"""ddops: sparse linear-algebra operators built from overlapping domain decomposition."""

from . import problems, testing
from .backend import cupy_available, get_array_module
from .coarse import coarse_basis
from .decomposition import Decomposition, Decomposition1D
from .operators import GlobalLowRankOperator, SchwarzOperator
from .preconditioners import TwoLevelSchwarz
from .problem import PoissonSolver, poisson_1d
from .problems import poisson_2d, poisson_3d, rigid_body_modes
from .spectral import best_rank_error

__version__ = "0.1.0"

__all__ = [
    "Decomposition",
    "Decomposition1D",
    "GlobalLowRankOperator",
    "PoissonSolver",
    "SchwarzOperator",
    "TwoLevelSchwarz",
    "best_rank_error",
    "coarse_basis",
    "cupy_available",
    "get_array_module",
    "poisson_1d",
    "poisson_2d",
    "poisson_3d",
    "problems",
    "rigid_body_modes",
    "testing",
]
