"""Model problems: sparse SPD matrices with their coordinates and null spaces.

- :func:`poisson_1d` (re-exported from :mod:`ddops.problems.poisson1d`): the 1D paper problem.
- :mod:`ddops.problems.grid`: finite differences on the unit square and cube
  (:func:`poisson_2d`, :func:`poisson_3d`, variable-coefficient :func:`diffusion_2d` /
  :func:`diffusion_3d`, :func:`high_contrast_channels`, :func:`grid_coordinates`).
- :mod:`ddops.problems.elasticity`: :func:`rigid_body_modes`, the null space of linear
  elasticity.
- :mod:`ddops.problems.fem`: P1 Poisson and linear elasticity on triangle meshes with
  scikit-fem (optional extra ``fem``; imported on first use).
"""

from .elasticity import rigid_body_modes
from .grid import (
    diffusion_2d,
    diffusion_3d,
    grid_coordinates,
    high_contrast_channels,
    poisson_2d,
    poisson_3d,
)
from .poisson1d import poisson_1d

__all__ = [
    "diffusion_2d",
    "diffusion_3d",
    "fem_elasticity_2d",
    "fem_poisson_2d",
    "grid_coordinates",
    "high_contrast_channels",
    "poisson_1d",
    "poisson_2d",
    "poisson_3d",
    "rigid_body_modes",
    "unit_square_mesh",
]

_FEM = ("fem_poisson_2d", "fem_elasticity_2d", "unit_square_mesh")


def __getattr__(name):
    # The scikit-fem helpers are reachable from here without importing scikit-fem up front:
    # fem.py itself imports it only when a function is called.
    if name in _FEM:
        from . import fem

        return getattr(fem, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
