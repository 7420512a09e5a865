"""The small 2D elasticity problems with stiff disks that several tests of ``ddops.dd`` use."""

from __future__ import annotations

import pytest

import ddops


def stiff_disks(n, contrast, *, kind="structured", count=8, radius=0.12, seed=1, parts=8,
                mesh=False):
    """2D P1 elasticity with stiff disks (clamped on the left), rigid body modes, METIS parts.

    Returns ``(A, d, Z)``, and with ``mesh`` also the mesh and the elements' Young's moduli
    (for the finite-element Neumann matrices).
    """
    pytest.importorskip("skfem")
    from ddops.problems import (
        element_centroids,
        fem_elasticity_2d,
        rigid_body_modes,
        stiff_inclusions,
        unit_square_mesh,
    )

    m = unit_square_mesh(n, kind=kind, seed=0)
    E = stiff_inclusions(element_centroids(m), count=count, radius=radius, contrast=contrast,
                         seed=seed)
    A, X = fem_elasticity_2d(mesh=m, E=E)
    d = ddops.Decomposition.from_matrix(A, parts, overlap=1, block_size=2)
    return (A, d, rigid_body_modes(X)) + ((m, E) if mesh else ())
