"""Algebraic two-level Schwarz preconditioners built from an assembled sparse matrix.

Nothing here uses the geometry of the problem: the subdomains come from METIS on the
graph of the matrix (``Decomposition.from_matrix``), the overlap from layers of that
graph, and the coarse spaces from the matrix and the non-overlapping partition:

* ``nicolaides``: the partition-of-unity restriction of the null space to each subdomain;
* ``gdsw``: one function per interface component (vertex, edge) and null-space vector,
  extended harmonically into the parts;
* ``rgdsw``: the reduced variant, functions on the vertex-like components only.

Part 1 solves the 2D Poisson problem (finite differences, ``n x n`` unknowns) with CG to
``rtol`` and prints the iterations of one level and of each coarse space.  Part 2, when
scikit-fem is installed (``pip install "ddops[fem]"``), does the same for P1 linear
elasticity (clamped on the left side, two unknowns per node) with GDSW built from the
constants, the two translations, and the three rigid body modes.  Run with::

    python examples/algebraic_preconditioner.py [--n 64] [--subdomains 16] [--overlap 1]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import ddops
from ddops.precond.schwarz import solve_with_history


def cg(A, M, b, rtol):
    """CG iterations and solve seconds (a warning when CG does not converge)."""
    start = time.perf_counter()
    _, info, _, iterations = solve_with_history(A, b, M, rtol=rtol)
    if info != 0:
        print(f"  warning: CG did not converge (info={info})")
    return iterations, time.perf_counter() - start


def row(label, M, iterations, seconds):
    dim = 0 if M is None else M.coarse_dim
    setup = 0.0 if M is None else M.setup_seconds
    print(f"  {label:<28} {dim:>8} {iterations:>6} {setup:>9.3f} {seconds:>9.3f}")


def header(title):
    print(f"\n{title}")
    print(f"  {'preconditioner':<28} {'coarse n0':>8} {'CG its':>6} {'set-up s':>9} "
          f"{'solve s':>9}")


def poisson(args, b_rng):
    A = ddops.poisson_2d(args.n)
    d = ddops.Decomposition.from_matrix(A, args.subdomains, args.overlap, partitioner="metis",
                                        seed=args.seed)
    b = b_rng.standard_normal(A.shape[0])
    header(f"2D Poisson, {A.shape[0]:,} unknowns, {d.num_subdomains} METIS subdomains, "
           f"overlap {args.overlap}")
    row("none", None, *cg(A, None, b, args.rtol))
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis=None)
    row("one-level additive Schwarz", M, *cg(A, M, b, args.rtol))
    for kind in ("nicolaides", "gdsw", "rgdsw"):
        M = ddops.TwoLevelSchwarz(A, d, coarse_basis=kind)
        row(f"two-level, {kind}", M, *cg(A, M, b, args.rtol))


def elasticity(args, b_rng):
    try:
        from ddops.problems.fem import fem_elasticity_2d

        A, xy = fem_elasticity_2d(args.fem_n)
    except ImportError as exc:
        print(f"\nskipping linear elasticity: {exc}")
        return
    Z = ddops.rigid_body_modes(xy)  # interleaved (x, y) per node, like A
    d = ddops.Decomposition.from_matrix(A, args.subdomains, args.overlap, block_size=2,
                                        seed=args.seed)
    b = b_rng.standard_normal(A.shape[0])
    header(f"P1 linear elasticity, {A.shape[0]:,} unknowns ({xy.shape[0]:,} nodes), "
           f"{d.num_subdomains} METIS subdomains, overlap {args.overlap}")
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis=None)
    row("one-level additive Schwarz", M, *cg(A, M, b, args.rtol))
    for label, null_space in [("constants", None), ("translations", Z[:, :2]),
                              ("rigid body modes", Z)]:
        M = ddops.TwoLevelSchwarz(A, d, coarse_basis="gdsw", null_space=null_space)
        row(f"gdsw, {label}", M, *cg(A, M, b, args.rtol))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=64,
                        help="Poisson grid points per direction (n x n unknowns)")
    parser.add_argument("--fem-n", type=int, default=32,
                        help="elasticity mesh: interior grid points per direction")
    parser.add_argument("--subdomains", type=int, default=16)
    parser.add_argument("--overlap", type=int, default=1, help="layers of the matrix graph")
    parser.add_argument("--rtol", type=float, default=1e-8)
    parser.add_argument("--seed", type=int, default=0, help="METIS and right-hand side seed")
    args = parser.parse_args()
    for name in ("n", "fem_n", "subdomains"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.overlap < 0:
        parser.error("--overlap must be >= 0")
    if not 0 < args.rtol < 1:
        parser.error("--rtol must be in (0, 1)")
    if args.subdomains < 2:
        parser.error("--subdomains must be >= 2 (the coarse spaces need an interface)")
    rng = np.random.default_rng(args.seed)
    try:
        poisson(args, rng)
        elasticity(args, rng)
    except ValueError as exc:  # e.g. more subdomains than unknowns
        parser.exit(2, f"error: {exc}\n")


if __name__ == "__main__":
    main()
