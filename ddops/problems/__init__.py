"""Model problems: sparse SPD matrices with their coordinates and null spaces.

- :func:`poisson_1d` (re-exported from :mod:`ddops.problems.poisson1d`): the 1D paper problem.
- :mod:`ddops.problems.grid`: finite differences on the unit square and cube
  (:func:`poisson_2d`, :func:`poisson_3d`, variable-coefficient :func:`diffusion_2d` /
  :func:`diffusion_3d`, :func:`high_contrast_channels`, :func:`grid_coordinates`).
- :mod:`ddops.problems.elasticity`: :func:`rigid_body_modes`, the null space of linear
  elasticity.
- :mod:`ddops.problems.random_fields`: high-contrast heterogeneous coefficients: cell
  coefficients for the grids (:func:`lognormal_field`, :func:`random_inclusions`), element
  values for the meshes (:func:`stiff_inclusions`, :func:`layered_coefficient`) and
  :func:`coefficient_contrast`.
- :mod:`ddops.problems.fem`: P1 Poisson and linear elasticity on triangle and tetrahedral
  meshes with scikit-fem (:func:`fem_poisson_2d`, :func:`fem_poisson_3d`,
  :func:`fem_elasticity_2d`, :func:`fem_elasticity_3d`, the meshes :func:`unit_square_mesh`
  and :func:`box_mesh`, :func:`element_centroids`), with per-element coefficients and local
  Neumann matrices (also alone: :func:`fem_elasticity_neumann`; optional extra ``fem``;
  imported on first use).
- :mod:`ddops.problems.files`: a user's problem from files (:func:`load_matrix` for Matrix
  Market, scipy ``.npz`` and ``.npy``; :func:`load_array` for vectors).
"""

from .elasticity import rigid_body_modes
from .files import load_array, load_matrix
from .grid import (
    diffusion_2d,
    diffusion_3d,
    grid_coordinates,
    high_contrast_channels,
    poisson_2d,
    poisson_3d,
)
from .poisson1d import poisson_1d
from .random_fields import (
    coefficient_contrast,
    layered_coefficient,
    lognormal_field,
    random_inclusions,
    stiff_inclusions,
)

__all__ = [
    "box_mesh",
    "coefficient_contrast",
    "diffusion_2d",
    "diffusion_3d",
    "element_centroids",
    "fem_elasticity_2d",
    "fem_elasticity_3d",
    "fem_elasticity_neumann",
    "fem_poisson_2d",
    "fem_poisson_3d",
    "grid_coordinates",
    "high_contrast_channels",
    "layered_coefficient",
    "load_array",
    "load_matrix",
    "lognormal_field",
    "poisson_1d",
    "poisson_2d",
    "poisson_3d",
    "random_inclusions",
    "rigid_body_modes",
    "stiff_inclusions",
    "unit_square_mesh",
]

_FEM = (
    "fem_poisson_2d",
    "fem_poisson_3d",
    "fem_elasticity_2d",
    "fem_elasticity_3d",
    "fem_elasticity_neumann",
    "unit_square_mesh",
    "box_mesh",
    "element_centroids",
)


def __getattr__(name):
    # The scikit-fem helpers are reachable from here without importing scikit-fem up front:
    # fem.py itself imports it only when a function is called.
    if name in _FEM:
        from . import fem

        return getattr(fem, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
