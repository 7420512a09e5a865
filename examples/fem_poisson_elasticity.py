"""Assemble the 2D/3D model problems of ``ddops.problems`` and print what they are.

Finite differences (Poisson in 2D and 3D, high-contrast diffusion) need only numpy and
scipy; the P1 finite elements (Poisson and linear elasticity on triangle meshes) need
scikit-fem: ``pip install "ddops[fem]"``.

Run with ``python examples/fem_poisson_elasticity.py [--n 63] [--mesh unstructured]``.
"""

import argparse

import numpy as np

from ddops import problems


def describe(name, A, extra=""):
    print(f"{name:<34} {A.shape[0]:>9,} unknowns {A.nnz:>10,} nonzeros  {extra}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=63, help="interior points per direction")
    parser.add_argument("--mesh", choices=["structured", "unstructured"], default="unstructured")
    parser.add_argument("--seed", type=int, default=0, help="seed of the unstructured mesh")
    args = parser.parse_args()
    if args.n < 1:
        parser.error("--n must be >= 1")
    n = args.n

    A, xy = problems.poisson_2d(n, return_coordinates=True)
    describe("poisson_2d (5-point)", A, f"h = 1/{n + 1}, coordinates {xy.shape}")
    n3 = max(1, round(n ** (2 / 3)))  # about as many unknowns in 3D
    describe("poisson_3d (7-point)", problems.poisson_3d(n3), f"n = {n3}")
    c = problems.high_contrast_channels(n, contrast=1e6)
    describe("diffusion_2d (channels, 1e6)", problems.diffusion_2d(c), f"{c.shape} cells")

    try:
        from ddops.problems import fem

        A, xy = fem.fem_poisson_2d(n, mesh=args.mesh, seed=args.seed)
    except ImportError as exc:
        print(f"skipping the finite elements: {exc}")
        return
    describe(f"fem_poisson_2d ({args.mesh})", A, f"coordinates {xy.shape}")

    K, xy = fem.fem_elasticity_2d(n, mesh=args.mesh, seed=args.seed)
    Z = problems.rigid_body_modes(xy)
    describe("fem_elasticity_2d (clamped left)", K, f"rigid body modes {Z.shape}")

    # Without the clamp the rigid body modes are the null space of the stiffness matrix.
    K0, xy0 = fem.fem_elasticity_2d(n, mesh=args.mesh, seed=args.seed, dirichlet=None)
    Z0 = problems.rigid_body_modes(xy0)
    residual = np.linalg.norm(K0 @ Z0) / (abs(K0).sum(axis=1).max() * np.linalg.norm(Z0))
    print(f"pure traction: ||K Z|| / (||K||_inf ||Z||) = {residual:.1e} (rigid body modes)")


if __name__ == "__main__":
    main()
