"""Set-ups with PARDISO's narrow multi-column solves split into single columns, and without.

For every problem of ``setup_profile.py`` (the set-up issue's), ``ddops.TwoLevelSchwarz``
with GDSW, AGDSW and GenEO (the finite-element Neumann matrices on the elasticity problems,
assembled once and not timed) as it is built now, full solves of ``p > 1`` columns going
to PARDISO one column at a time where ``p * nnz(L) < PARDISO_COLUMN_SOLVES * rows``
(GenEO's block Krylov method, the harmonic extension's interiors), against the same set-up
with every such solve in one call (``PARDISO_COLUMN_SOLVES = 0``).  The ways alternate in
rounds, best of ``--repeat``, one BLAS/MKL thread, the decomposition built once per problem
and not timed.  Prints the set-up (wall / process CPU seconds) of each way, their ratio, the
coarse dimensions and how far apart the two coarse spaces are (GDSW, AGDSW: the largest
entry of the difference of the bases relative to the basis' largest; GenEO: of the
subdomains' smallest eigenvalues relative to the threshold; the same factors solve the
columns either way, so rounding only), and pyamg's smoothed aggregation set-up (rigid body modes on
elasticity) timed in the same rounds, the peer the set-up target names.  CG's iterations
are ``setup_profile.py``'s.  Needs PARDISO (``ddops[solvers]``): without it both rows are
SuperLU's and the same.

    python benchmarks/pardiso_columns.py                 # the six problems (several minutes)
    python benchmarks/pardiso_columns.py --problems 3 --repeat 4
    python benchmarks/pardiso_columns.py --quick         # small sizes
    python benchmarks/pardiso_columns.py --calls         # every solve timed both ways

With ``--calls`` every set-up runs once and each of its full solves of several columns is
timed both ways on the same factors, in place (best of three each): the totals by ``p *
nnz(L) / rows``, and what thresholds around ``PARDISO_COLUMN_SOLVES`` would have taken
against the faster way of every solve.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agdsw_indicator import add_round_flags, chosen_problems  # noqa: E402
from common import machine_summary, timed_setup  # noqa: E402
from shared_order import sa_setup  # noqa: E402

KINDS = ("gdsw", "agdsw", "geneo")
WAYS = ("one call", "split")


def measure(prob, d, kind: str, split: bool, neumann=None) -> dict:
    """One set-up of ``kind``, PARDISO's narrow multi-column solves split or not."""
    import ddops
    from ddops.linalg import local_solvers

    default = local_solvers.PARDISO_COLUMN_SOLVES
    local_solvers.PARDISO_COLUMN_SOLVES = default if split else 0
    try:
        space = {} if kind == "gdsw" else {kind: (
            ddops.AGDSWOptions(neumann=neumann) if kind == "agdsw"
            else ddops.GenEOOptions(neumann=neumann))}
        options = ddops.SchwarzOptions(coarse=kind, null_space=prob.null_space, **space)
        M, setup, setup_cpu = timed_setup(prob, d, options)
    finally:
        local_solvers.PARDISO_COLUMN_SOLVES = default
    info = M.coarse_info
    return {"setup": setup, "setup_cpu": setup_cpu, "coarse_dim": int(M.coarse_dim),
            "Phi": M.coarse.Phi,
            "eigenvalues": None if kind != "geneo" else (
                np.asarray(info.eigenvalues, dtype=float), float(info.threshold))}


def apart(one: dict, split: dict) -> float:
    """How far the two coarse spaces are: GDSW and AGDSW, the largest entry of the
    difference of the bases relative to the basis' largest entry; GenEO (whose
    eigenvectors within a cluster may turn), the largest difference of the subdomains'
    smallest eigenvalues relative to the threshold.  inf for two dimensions."""
    if one["coarse_dim"] != split["coarse_dim"]:
        return float("inf")
    if one["eigenvalues"] is not None:
        (a, tau), (b, _) = one["eigenvalues"], split["eigenvalues"]
        both = np.isfinite(a) & np.isfinite(b)
        return float(np.abs(a - b)[both].max() / tau) if both.any() else 0.0
    P, Q = one["Phi"], split["Phi"]
    if P is None or not P.nnz:
        return 0.0
    return float(abs(P - Q).max() / abs(P).max())


def time_every_solve(prob, d, kind: str, neumann=None) -> list:
    """One set-up of ``kind`` with every full solve of more than one column timed in one
    call and column by column (best of three each); ``(p, nnz(L), rows, one call s, split
    s)`` per solve."""
    import time

    import ddops
    from ddops.linalg import local_solvers

    calls: list = []
    real = local_solvers.PardisoBlocks.solve
    default = local_solvers.PARDISO_COLUMN_SOLVES

    def timed(self, X, trans="N"):
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[1] < 2:
            return real(self, X, trans)
        one = split = np.inf
        local_solvers.PARDISO_COLUMN_SOLVES = 0  # (one call with every column)
        try:
            for _ in range(3):
                start = time.perf_counter()
                Y = real(self, X, trans)
                one = min(one, time.perf_counter() - start)
                start = time.perf_counter()
                for j in range(X.shape[1]):
                    real(self, np.ascontiguousarray(X[:, j]), trans)
                split = min(split, time.perf_counter() - start)
        finally:
            local_solvers.PARDISO_COLUMN_SOLVES = default
        calls.append((X.shape[1], int(self.nnz), X.shape[0], one, split))
        return Y

    local_solvers.PardisoBlocks.solve = timed
    try:
        space = {} if kind == "gdsw" else {kind: (
            ddops.AGDSWOptions(neumann=neumann) if kind == "agdsw"
            else ddops.GenEOOptions(neumann=neumann))}
        timed_setup(prob, d, ddops.SchwarzOptions(coarse=kind, null_space=prob.null_space,
                                                   **space))
    finally:
        local_solvers.PardisoBlocks.solve = real
    return calls


def report_calls(calls: list) -> None:
    """The totals of :func:`time_every_solve`'s solves (``(problem, kind, ...)`` each) by
    set-up, by ``p * nnz / rows`` and by threshold."""
    from ddops.linalg.local_solvers import PARDISO_COLUMN_SOLVES

    c = np.array([r[2:] for r in calls], dtype=float).reshape(-1, 5)
    load, one, split = c[:, 0] * c[:, 1] / c[:, 2], c[:, 3], c[:, 4]
    rule = np.where(load < PARDISO_COLUMN_SOLVES, split, one)
    print("\n| problem | coarse space | solves | one call s | the rule's s |")
    print("|---|---|---:|---:|---:|")
    for key in dict.fromkeys((r[0], r[1]) for r in calls):
        s = np.array([(r[0], r[1]) == key for r in calls])
        print(f"| {key[0]} | {key[1]} | {int(s.sum())} | {one[s].sum():.3f} | "
              f"{rule[s].sum():.3f} |")
    print(f"\n{len(c)} full solves of several columns: {one.sum():.3f} s in one call each, "
          f"{split.sum():.3f} s column by column, {np.minimum(one, split).sum():.3f} s the "
          "faster way of each\n")
    print("| p nnz(L) / rows | solves | columns | one call s | split s | one call / split |")
    print("|---|---:|---|---:|---:|---:|")
    edges = [0, 100, 200, 300, 400, 600, 800, 1200, 2000, np.inf]
    for a, b in zip(edges[:-1], edges[1:]):
        s = (load >= a) & (load < b)
        if s.any():
            print(f"| {a:g}-{b:g} | {int(s.sum())} | {int(c[s, 0].min())}-{int(c[s, 0].max())} "
                  f"| {one[s].sum():.3f} | {split[s].sum():.3f} | "
                  f"{one[s].sum() / split[s].sum():.2f} |")
    print("\n| threshold | total s |")
    print("|---:|---:|")
    for t in sorted({100, 200, 300, PARDISO_COLUMN_SOLVES, 600, 800}):
        print(f"| {t}{' (the default)' if t == PARDISO_COLUMN_SOLVES else ''} | "
              f"{np.where(load < t, split, one).sum():.3f} |")


def main(argv=None) -> int:
    from threadpoolctl import threadpool_limits

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_flags(parser)
    parser.add_argument("--kinds", nargs="*", choices=KINDS, default=list(KINDS))
    parser.add_argument("--calls", action="store_true",
                        help="time every multi-column solve both ways instead")
    args = parser.parse_args(argv)
    print(machine_summary(memory=True, ddops=True))
    if args.calls:
        calls: list = []
        with threadpool_limits(1):
            for label, prob, d, neumann in chosen_problems(args):
                for kind in args.kinds:
                    calls += [(label, kind, *c) for c in time_every_solve(prob, d, kind,
                                                                        neumann)]
        report_calls(calls)
        if args.json:
            Path(args.json).write_text(json.dumps(calls))
        return 0
    print("one BLAS/MKL thread; set-up wall / CPU seconds, best of "
          f"{args.repeat} alternating rounds; the decomposition is not timed\n")
    print("| problem | coarse space | set-up, one call | set-up, split | one call / split | "
          "coarse dim | apart | pyamg SA set-up | split / SA |")
    print("|---|---|---:|---:|---:|---|---:|---:|---:|")
    out = []
    with threadpool_limits(1):
        for label, prob, d, neumann in chosen_problems(args):
            best: dict = {}
            for _ in range(max(args.repeat, 1)):  # interleaved rounds
                r = sa_setup(prob)
                if "sa" not in best or r["setup"] < best["sa"]["setup"]:
                    best["sa"] = r
                for kind in args.kinds:
                    for way in WAYS:
                        r = measure(prob, d, kind, way == "split", neumann)
                        key = (kind, way)
                        if key not in best or r["setup"] < best[key]["setup"]:
                            best[key] = r
            sa = best["sa"]
            for kind in args.kinds:
                one, split = best[(kind, "one call")], best[(kind, "split")]
                far = apart(one, split)
                for r in (one, split):
                    del r["Phi"], r["eigenvalues"]
                print(f"| {label}, {prob.A.shape[0]:,} unknowns | {kind} | {one['setup']:.3f} "
                      f"/ {one['setup_cpu']:.3f} | {split['setup']:.3f} / "
                      f"{split['setup_cpu']:.3f} | {one['setup'] / split['setup']:.2f} | "
                      f"{one['coarse_dim']}, {split['coarse_dim']} | {far:.1e} | "
                      f"{sa['setup']:.3f} / {sa['setup_cpu']:.3f} | "
                      f"{split['setup'] / sa['setup']:.1f} |", flush=True)
                out.append({"problem": label, "kind": kind, "one_call": one, "split": split,
                            "apart": far, "sa": sa})
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
