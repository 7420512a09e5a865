"""Krylov iteration counts with classical Schwarz preconditioners on the 1D Poisson problem.

For ``n`` line elements (``n - 1`` unknowns), ``N = n / 32`` subdomains and an
overlap of 2 elements, solve ``A x = b`` (random ``b``) to ``rtol = 1e-8`` with

* CG: no preconditioner, Jacobi, one-level and two-level additive Schwarz;
* GMRES: two-level restricted additive Schwarz (RAS).

The two-level counts stay flat as ``n`` (and ``N``) grow, the one-level counts
grow linearly in ``N``.  For the Poisson matrix Jacobi is a constant scaling,
so it matches no preconditioner.  Run with::

    python examples/krylov_iterations.py [--sizes 256 1024 4096 16384]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import ddops
from ddops.precond.schwarz import TwoLevelSchwarz, jacobi, solve_with_history

METHODS = {
    # label: (Krylov method, preconditioner factory)
    "CG none": ("cg", lambda A, d: None),
    "CG Jacobi": ("cg", lambda A, d: jacobi(A)),
    "CG 1-level": ("cg", lambda A, d: TwoLevelSchwarz(A, d, coarse=False)),
    "CG 2-level": ("cg", lambda A, d: TwoLevelSchwarz(A, d)),
    "GMRES RAS 2-level": ("gmres", lambda A, d: TwoLevelSchwarz(A, d, variant="restricted")),
}


def run(n: int, rtol: float, seed: int) -> dict[str, tuple[int, float, float]]:
    """Iterations, set-up and solve seconds of every method for one problem size."""
    A = ddops.poisson_1d(n)
    d = ddops.Decomposition1D(n, n // 32, overlap=2)
    b = np.random.default_rng(seed).standard_normal(A.shape[0])
    out = {}
    for label, (method, factory) in METHODS.items():
        start = time.perf_counter()
        M = factory(A, d)
        setup = time.perf_counter() - start
        start = time.perf_counter()
        x, info, _, iterations = solve_with_history(A, b, M, method, rtol=rtol)
        solve = time.perf_counter() - start
        if info != 0:
            print(f"warning: {label} did not converge for n={n} (info={info})")
        out[label] = (iterations, setup, solve)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096, 16384])
    parser.add_argument("--rtol", type=float, default=1e-8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    results = {n: run(n, args.rtol, args.seed) for n in args.sizes}
    labels = list(METHODS)
    width = max(len(label) for label in labels) + 2

    print(f"\nIterations to rtol={args.rtol:g} (N = n/32 subdomains, overlap 2)")
    print(f"{'n':>6} {'N':>4} " + "".join(f"{label:>{width}}" for label in labels))
    for n, res in results.items():
        print(f"{n:>6} {n // 32:>4} " + "".join(f"{res[k][0]:>{width}}" for k in labels))

    print("\nSet-up + solve seconds (solve includes one residual check per CG iteration)")
    print(f"{'n':>6} {'N':>4} " + "".join(f"{label:>{width}}" for label in labels))
    for n, res in results.items():
        cells = "".join(f"{f'{res[k][1]:.3f}+{res[k][2]:.3f}':>{width}}" for k in labels)
        print(f"{n:>6} {n // 32:>4} {cells}")


if __name__ == "__main__":
    main()
