"""Train symmetric Schwarz attention as a CG preconditioner for the 1D Poisson problem.

Builds the learned preconditioner ``M = B + Phi Q0 Q0^T Phi^T + sum_i R_i^T Q_i Q_i^T R_i``
(``B`` the one-level Schwarz local solves, so ``M`` is SPD) twice: from a
random initialisation and from two-level additive Schwarz.  Each is trained on
the energy objective ``E ||M A z - z||_A^2`` with the CG-iteration safeguard,
then compared with one- and two-level Schwarz.  A few seconds for the
default ``n = 1024``::

    python examples/learned_preconditioner.py [--n 1024] [--steps 300]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import ddops
from ddops.precond.learned import (
    cg_iterations,
    learned_schwarz_preconditioner,
    train_preconditioner,
)
from ddops.precond.schwarz import TwoLevelSchwarz


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()

    A = ddops.poisson_1d(args.n)
    d = ddops.Decomposition1D(args.n, max(1, args.n // 32), overlap=2)
    b = np.random.default_rng(0).standard_normal(A.shape[0])

    print(f"n={args.n}, N={d.num_subdomains}: CG iterations to rtol 1e-8")
    for label, M in (("one-level Schwarz", TwoLevelSchwarz(A, d, coarse=False)),
                     ("two-level Schwarz", TwoLevelSchwarz(A, d))):
        print(f"  {label:<34} {cg_iterations(A, M, b)[0]:>5}")

    for init in ("scaled", "classical"):
        op = learned_schwarz_preconditioner(A, d, local_rank=4, base="one_level", init=init)
        start = time.perf_counter()
        t = train_preconditioner(op, A, steps=args.steps, lr=0.1, check_every=50, b=b)
        seconds = time.perf_counter() - start
        trail = " -> ".join(str(c.iterations) for c in t.checks)
        print(f"  learned, {init} init{'':<{19 - len(init)}} {t.best.iterations:>5}"
              f"   (checks: {trail}; kept step {t.best.step}; {seconds:.1f} s)")


if __name__ == "__main__":
    main()
