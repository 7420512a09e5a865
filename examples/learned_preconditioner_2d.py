"""The learned symmetric Schwarz preconditioner on 2D problems, against two-level GDSW in CG.

For 2D Poisson and for high-contrast diffusion (coefficient ``contrast`` in
channels that cross the subdomain boundaries), on a box decomposition with
overlap 1 and the GDSW coarse space:

* two-level additive Schwarz with GDSW (``TwoLevelSchwarz(coarse_basis="gdsw")``),
  and its hybrid form (multiplicative coarse correction);
* the learned preconditioner ``M = B + Phi Q0 Q0^T Phi^T + sum_i R_i^T Q_i Q_i^T R_i``
  (``B`` the one-level local solves, so ``M`` is SPD for any parameters),
  started from the two-level initialisation (``init="classical"``: exactly
  two-level additive GDSW before training) and trained on the energy
  objective with the CG-iteration safeguard
  (:func:`ddops.precond.learned.train_preconditioner`), once with only the
  coarse factor trained and once with small random local factors as well.

CG to ``rtol = 1e-8`` on one fixed right-hand side.  About a minute with the
defaults on two cores::

    python examples/learned_preconditioner_2d.py [--n 64] [--subdomains 16] [--steps 300] [--lr 0.1]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import ddops
from ddops.experiments.grid import grid_parts
from ddops.precond.learned import (
    cg_iterations,
    learned_schwarz_preconditioner,
    train_preconditioner,
)
from ddops.problems import diffusion_2d, high_contrast_channels, poisson_2d


def compare(name: str, A, n: int, subdomains: int, steps: int, lr: float = 0.1,
            seed: int = 0) -> dict:
    """CG iterations of GDSW and of the learned preconditioner on one problem."""
    d = ddops.Decomposition.from_grid((n, n), grid_parts(subdomains, 2, n), overlap=1)
    b = np.random.default_rng(seed).standard_normal(A.shape[0])
    rows = {}
    for label, variant in (("two-level GDSW (additive)", "additive"),
                           ("two-level GDSW (hybrid)", "hybrid")):
        t0 = time.perf_counter()
        M = ddops.TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant=variant)
        its = cg_iterations(A, M, b)[0]
        rows[label] = {"iterations": its, "seconds": time.perf_counter() - t0}
    Phi = ddops.coarse_basis(d, "gdsw", A=A)
    for label, local_scale in (("learned, coarse factor trained", 0.0),
                               ("learned, coarse and local factors", 1e-2)):
        op = learned_schwarz_preconditioner(A, d, local_rank=4, base="one_level",
                                            init="classical", coarse_basis=Phi,
                                            local_init_scale=local_scale, seed=seed)
        t0 = time.perf_counter()
        t = train_preconditioner(op, A, steps=steps, lr=lr, check_every=50, b=b)
        rows[label] = {"iterations": t.best.iterations, "initial": t.initial.iterations,
                       "checks": [c.iterations for c in t.checks], "kept_step": t.best.step,
                       "objective_start": t.initial.objective, "objective_end": t.final.objective,
                       "seconds": time.perf_counter() - t0, "status": t.status}
    print(f"{name}: n = {n} x {n}, {d.num_subdomains} boxes, GDSW n0 = {Phi.shape[1]}; CG "
          "iterations to rtol 1e-8")
    for label, r in rows.items():
        extra = (f"  (start {r['initial']}, checks {' -> '.join(map(str, r['checks']))}, kept "
                 f"step {r['kept_step']}, objective {r['objective_start']:.3e} -> "
                 f"{r['objective_end']:.3e}, {r['seconds']:.1f} s)" if "checks" in r else "")
        print(f"  {label:<36} {r['iterations']:>5}{extra}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=64, help="points per direction (default 64)")
    parser.add_argument("--subdomains", type=int, default=16, help="boxes (default 16)")
    parser.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    parser.add_argument("--lr", type=float, default=0.1,
                        help="learning rate relative to the problem's scale (default 0.1)")
    parser.add_argument("--contrast", type=float, default=1e6,
                        help="channel coefficient over the background (default 1e6)")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write the numbers")
    args = parser.parse_args()
    results = {
        "poisson2d": compare("2D Poisson", poisson_2d(args.n), args.n, args.subdomains,
                             args.steps, args.lr),
        "high_contrast": compare(f"high-contrast channels (contrast {args.contrast:g})",
                                 diffusion_2d(high_contrast_channels(args.n, args.contrast)),
                                 args.n, args.subdomains, args.steps, args.lr),
    }
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "results": results}, fh, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
