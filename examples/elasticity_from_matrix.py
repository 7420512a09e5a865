"""A robust preconditioner for heterogeneous elasticity from the assembled matrix alone.

Only what a user of another code has: the assembled stiffness matrix ``A`` (here read
back from a Matrix Market file) and the node coordinates, which give the rigid body
modes.  No mesh, no element matrices.  GDSW's iterations grow with the stiffness
contrast; GenEO, whose local matrices are oversampled for a matrix that is not
diagonally dominant (``docs/adaptive.md``), stays flat.

Run with ``python examples/elasticity_from_matrix.py [--n 63] [--parts 32]``
(needs scikit-fem to assemble the example matrix: ``pip install "ddops[fem]"``).
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse.linalg as spla

import ddops


def assemble(n, contrast, path):
    """Write a P1 plane-strain matrix with 60 stiff disks to ``path``; the coordinates."""
    from ddops.problems import (
        element_centroids,
        fem_elasticity_2d,
        stiff_inclusions,
        unit_square_mesh,
    )

    mesh = unit_square_mesh(n, kind="unstructured", seed=0)
    E = stiff_inclusions(element_centroids(mesh), count=60, radius=0.035, contrast=contrast,
                         seed=0)
    A, xy = fem_elasticity_2d(mesh=mesh, E=E)
    scipy.io.mmwrite(path, A)
    return xy


def iterations(A, M, b):
    count = [0]
    _, info = spla.cg(A, b, M=M, rtol=1e-8, maxiter=5000,
                      callback=lambda _x: count.__setitem__(0, count[0] + 1))
    return count[0] if info == 0 else f"> {count[0]} (not converged)"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=63, help="mesh size (elements per side)")
    parser.add_argument("--parts", type=int, default=32, help="METIS parts")
    args = parser.parse_args()
    if args.n < 4 or args.parts < 2:
        parser.error("--n must be >= 4 and --parts >= 2")
    print(f"{'contrast':>9} {'coarse space':<8} {'dim':>5} {'its':>6} {'set-up [s]':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for contrast in (1.0, 1e3, 1e6):
            path = Path(tmp) / "A.mtx"
            xy = assemble(args.n, contrast, path)
            A = scipy.io.mmread(path).tocsr()  # from here on: the matrix and coordinates only
            Z = ddops.rigid_body_modes(xy)
            d = ddops.Decomposition.from_matrix(A, args.parts, overlap=1, block_size=2)
            b = np.random.default_rng(0).standard_normal(A.shape[0])
            for kind in ("gdsw", "geneo"):
                start = time.perf_counter()
                M = ddops.TwoLevelSchwarz(A, d, kind, null_space=Z)
                setup = time.perf_counter() - start
                print(f"{contrast:>9g} {kind:<8} {M.coarse_dim:>5} {iterations(A, M, b):>6} "
                      f"{setup:>11.2f}")


if __name__ == "__main__":
    main()
