"""``TwoLevelSchwarz.update``: the numeric phase again for a matrix with the same pattern.

Two parts, one thread (``--threads``), process CPU seconds beside wall seconds:

1. **Ratios.**  For each problem and coarse space, a fresh set-up on a new matrix against
   ``M.update(A_new)`` and ``M.update(A_new, reuse_coarse=True)`` of a preconditioner built
   on the old one (same decomposition, given; the decomposition is not in any of the three).
   Targets: update at most 0.5x the fresh set-up, reuse_coarse at most 0.25x.
2. **Sequences** of ``--steps`` matrices with drifting coefficients: 2D high-contrast
   channels that move by one cell per step, and 3D elasticity whose stiff balls grow.  Per
   step: CG iterations (rtol 1e-8) and set-up + solve seconds for a fresh preconditioner, for
   ``update``, for ``update(reuse_coarse=True)`` and for pyamg smoothed aggregation rebuilt
   every step (the peer; rigid body modes for elasticity).

    python benchmarks/update.py                  # the sizes of the targets (minutes)
    python benchmarks/update.py --quick          # small sizes, seconds
    python benchmarks/update.py --spaces gdsw    # only GDSW
    python benchmarks/update.py --extension-reuse ordering   # keep orderings, not analyses
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse.linalg as spla
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import add_json_flag, add_quick_flag, add_threads_flag, machine_summary  # noqa: E402

import ddops  # noqa: E402
from ddops.precond.options import EXTENSION_REUSE  # noqa: E402

RTOL = 1e-8
UPDATE_TARGET = 0.5
REUSE_TARGET = 0.25


class Clock:
    """Wall and process CPU seconds of a block."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu
        return False


# -- problems: (A1, A2, decomposition, null space) with one pattern ------------------------------
def poisson(dim: int, n: int, parts: int):
    """Diffusion on the unit square/cube with coefficient 1 and a smooth variation of it."""
    shape = (n + 1,) * dim
    grid = np.meshgrid(*[np.linspace(0, 1, n + 1)] * dim, indexing="ij")
    smooth = 1.0 + 0.5 * np.sin(3 * grid[0]) * np.cos(2 * grid[1])
    build = ddops.problems.diffusion_2d if dim == 2 else ddops.problems.diffusion_3d
    A1, A2 = build(np.ones(shape)), build(smooth)
    return A1, A2, ddops.Decomposition.from_matrix(A1, parts), None, None


def balls_E(radius: float, contrast: float):
    """Young's modulus: ``contrast`` in 8 balls of ``radius``, 1 elsewhere."""
    centres = np.array([[x, y, z] for x in (0.3, 0.7) for y in (0.3, 0.7) for z in (0.3, 0.7)])

    def E(centroids):
        dist = np.linalg.norm(centroids[:, None, :] - centres[None], axis=2).min(axis=1)
        return np.where(dist < radius, contrast, 1.0)
    return E


def elasticity(n: int, parts: int, radius=(0.1, 0.12), contrast: float = 1e3):
    """3D P1 elasticity with stiff balls that grow from ``radius[0]`` to ``radius[1]``, and
    the finite-element Neumann matrices of both (for the adaptive spaces)."""
    A1, X = ddops.problems.fem_elasticity_3d(n, E=balls_E(radius[0], contrast))
    d = ddops.Decomposition.from_matrix(A1, parts, block_size=3)
    A1, _, N1 = ddops.problems.fem_elasticity_3d(n, E=balls_E(radius[0], contrast), neumann=d)
    A2, _, N2 = ddops.problems.fem_elasticity_3d(n, E=balls_E(radius[1], contrast), neumann=d)
    return A1, A2, d, ddops.rigid_body_modes(X), (N1, N2)


def build(A, d, space: str, Z, threads: int, neumann=None,
          extension_reuse: str = "analysis") -> ddops.TwoLevelSchwarz:
    """The preconditioner of one row (``neumann``: the space's finite-element matrices)."""
    sub = {}
    if neumann is not None:
        kind = {"agdsw": ddops.AGDSWOptions, "geneo": ddops.GenEOOptions}[space]
        sub = {space: kind(neumann=neumann)}
    return ddops.TwoLevelSchwarz(A, d, options=ddops.SchwarzOptions(
        coarse=space, null_space=Z, threads=threads,
        extension_reuse=extension_reuse, **sub))


def ratio_rows(problems: dict, spaces: list[str], threads: int,
               extension_reuse: str = "analysis") -> list[dict]:
    rows = []
    for name, make in problems.items():
        A1, A2, d, Z, neumann = make()
        for space in spaces:
            # the adaptive spaces on elasticity with finite-element Neumann matrices (the
            # algebraic ones need a diagonally dominant A)
            fem = neumann is not None and space in ("agdsw", "geneo")
            args = (d, space, Z, threads)
            with Clock() as fresh:
                build(A2, *args, neumann[1] if fem else None, extension_reuse)
            M = build(A1, *args, neumann[0] if fem else None, extension_reuse)
            with Clock() as upd:
                M.update(A2, neumann=neumann[1] if fem else None)
            M = build(A1, *args, neumann[0] if fem else None, extension_reuse)
            with Clock() as reuse:
                M.update(A2, reuse_coarse=True)
            row = {"problem": name, "n": int(A1.shape[0]), "parts": d.num_subdomains,
                   "space": space + (" (FE Neumann)" if fem else ""),
                   "fresh_cpu": fresh.cpu, "fresh_wall": fresh.wall,
                   "update_cpu": upd.cpu, "update_wall": upd.wall,
                   "reuse_cpu": reuse.cpu, "reuse_wall": reuse.wall,
                   "update_ratio": upd.cpu / fresh.cpu, "reuse_ratio": reuse.cpu / fresh.cpu}
            rows.append(row)
            print(f"| {name} | {row['n']} | {row['space']} | "
                  f"{fresh.cpu:.2f} ({fresh.wall:.2f}) | "
                  f"{upd.cpu:.2f} ({upd.wall:.2f}) | {row['update_ratio']:.2f} "
                  f"{'PASS' if row['update_ratio'] <= UPDATE_TARGET else 'MISS'} | "
                  f"{reuse.cpu:.2f} ({reuse.wall:.2f}) | {row['reuse_ratio']:.2f} "
                  f"{'PASS' if row['reuse_ratio'] <= REUSE_TARGET else 'MISS'} |", flush=True)
    return rows


# -- sequences ----------------------------------------------------------------------
def cg_iterations(A, b, M) -> int:
    count = [0]

    def callback(_):
        count[0] += 1
    _, info = spla.cg(A, b, rtol=RTOL, maxiter=2000, M=M, callback=callback)
    return count[0] if info == 0 else -count[0]


def channels(n: int, step: int, contrast: float = 1e4) -> np.ndarray:
    """Horizontal channels every 8 cells, one cell wide, moved up by ``step`` cells."""
    c = np.ones((n + 1, n + 1))
    rows = (np.arange(4, n + 1, 8) + step) % (n + 1)
    c[rows, 1:-1] = contrast
    return c


def sequence(name: str, matrices: list, d, Z, space: str, threads: int,
             extension_reuse: str = "analysis") -> list[dict]:
    import pyamg

    rng = np.random.default_rng(0)
    b = rng.standard_normal(matrices[0].shape[0])
    kw = dict(coarse_basis=space, null_space=Z, threads=threads,
              extension_reuse=extension_reuse)
    kept = {"update": None, "reuse": None}
    rows = []
    for k, A in enumerate(matrices):
        row = {"sequence": name, "step": k}
        for method in ("fresh", "update", "reuse", "pyamg_sa"):
            with Clock() as setup:
                if method == "fresh" or kept.get(method) is None and method != "pyamg_sa":
                    M = ddops.TwoLevelSchwarz(A, d, **kw)
                    if method != "fresh":
                        kept[method] = M
                elif method == "pyamg_sa":
                    ml = pyamg.smoothed_aggregation_solver(
                        A, B=Z if Z is not None else None, max_coarse=500)
                    M = ml.aspreconditioner(cycle="V")
                else:
                    M = kept[method].update(A, reuse_coarse=method == "reuse")
            with Clock() as solve:
                its = cg_iterations(A, b, M)
            row[method] = {"iterations": its, "setup_cpu": setup.cpu, "solve_cpu": solve.cpu,
                           "total_cpu": setup.cpu + solve.cpu, "total_wall":
                           setup.wall + solve.wall}
        rows.append(row)
        print(f"| {name} | {k} | " + " | ".join(
            f"{row[m]['iterations']}, {row[m]['total_cpu']:.2f}"
            for m in ("fresh", "update", "reuse", "pyamg_sa")) + " |", flush=True)
    totals = {m: sum(r[m]["total_cpu"] for r in rows) for m in ("fresh", "update", "reuse",
                                                                 "pyamg_sa")}
    print(f"| {name} | total | " + " | ".join(f"{totals[m]:.2f}" for m in totals) + " |")
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_quick_flag(parser, "small problems (seconds)")
    add_json_flag(parser)
    add_threads_flag(parser)
    parser.add_argument("--spaces", default="gdsw,agdsw,geneo",
                        help="coarse spaces of the ratio table (comma-separated)")
    parser.add_argument("--sequence-space", default="gdsw",
                        help="coarse space of the sequences")
    parser.add_argument("--steps", type=int, default=10, help="matrices per sequence")
    parser.add_argument("--elasticity-n", type=int, default=None,
                        help="grid of the 3D elasticity row (default 32: 114,444 unknowns)")
    parser.add_argument("--no-sequences", action="store_true")
    parser.add_argument("--extension-reuse", choices=EXTENSION_REUSE, default="analysis",
                        help="what the GDSW-type spaces keep for update (default analysis)")
    args = parser.parse_args(argv)
    reuse = args.extension_reuse
    threads = args.threads or 1
    spaces = [s for s in args.spaces.split(",") if s]
    q = args.quick
    print(machine_summary(memory=True, pyamg=True, ddops=True))
    print(f"one thread per process (threads={threads}); process CPU seconds (wall in "
          "parentheses); the decomposition is given to all three and not timed\n")
    problems = {
        "2D Poisson": lambda: poisson(2, 63 if q else 511, 16 if q else 128),
        "3D Poisson": lambda: poisson(3, 15 if q else 50, 8 if q else 64),
        "3D elasticity": lambda: elasticity(args.elasticity_n or (7 if q else 32),
                                            8 if q else 64),
    }
    print("| problem | n | coarse | fresh set-up | update | update / fresh | "
          "reuse_coarse | reuse / fresh |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    out = {"machine": machine_summary(memory=True, pyamg=True, ddops=True), "threads": threads}
    with threadpool_limits(threads):
        out["ratios"] = ratio_rows(problems, spaces, threads, reuse)
        if not args.no_sequences:
            print("\niterations, set-up + solve CPU seconds per step")
            print("| sequence | step | fresh | update | update(reuse_coarse) | pyamg SA |")
            print("|---|---:|---|---|---|---|")
            n2 = 63 if q else 255
            mats = [ddops.problems.diffusion_2d(channels(n2, k)) for k in range(args.steps)]
            d2 = ddops.Decomposition.from_matrix(mats[0], 16 if q else 64)
            out["channels"] = sequence("2D channels", mats, d2, None, args.sequence_space,
                                       threads, reuse)
            n3 = 7 if q else 20
            mats, X = [], None
            for k in range(args.steps):
                A, X = ddops.problems.fem_elasticity_3d(
                    n3, E=balls_E(0.08 + 0.01 * k, 1e3))
                mats.append(A)
            d3 = ddops.Decomposition.from_matrix(mats[0], 8 if q else 32, block_size=3)
            out["elasticity"] = sequence("3D growing balls", mats, d3,
                                         ddops.rigid_body_modes(X), args.sequence_space,
                                         threads, reuse)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
