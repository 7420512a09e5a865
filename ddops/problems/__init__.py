"""Model problems: sparse SPD matrices with their coordinates and null spaces.

- :func:`poisson_1d` (re-exported from :mod:`ddops.problem`): the 1D paper problem.
- :mod:`ddops.problems.grid`: finite differences on the unit square and cube
  (:func:`poisson_2d`, :func:`poisson_3d`, variable-coefficient :func:`diffusion_2d` /
  :func:`diffusion_3d`, :func:`high_contrast_channels`, :func:`grid_coordinates`).
"""

from ..problem import poisson_1d
from .grid import (
    diffusion_2d,
    diffusion_3d,
    grid_coordinates,
    high_contrast_channels,
    poisson_2d,
    poisson_3d,
)

__all__ = [
    "diffusion_2d",
    "diffusion_3d",
    "grid_coordinates",
    "high_contrast_channels",
    "poisson_1d",
    "poisson_2d",
    "poisson_3d",
]
