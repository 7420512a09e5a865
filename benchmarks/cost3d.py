"""Set-up, solve and memory of the two-level preconditioner against smoothed aggregation.

Run from the repository root::

    python benchmarks/cost3d.py                         # targets + subdomain sizes (~35 min)
    python benchmarks/cost3d.py --quick                 # small sizes (~2 min)
    python benchmarks/cost3d.py --sections targets --problems elasticity3d
    python benchmarks/cost3d.py --sections targets --problems elasticity3d --rhs random
    python benchmarks/cost3d.py --sections targets --petsc-python PY   # with GAMG, BoomerAMG
    python benchmarks/cost3d.py --sections huge         # 3D Poisson with 10^7 unknowns

Every measurement runs in a fresh process (``--threads`` BLAS/OpenMP threads, default 1,
also for MKL PARDISO), best of ``--repeat`` (default 1) by total time.  CG (scipy) to
``rtol = 1e-8`` from ``x0 = 0``, right-hand side ``A 1`` (``--rhs random``: a random
vector, which favours no coarse space; the solution of ``A 1``, the constant vector, is
nearly in the GDSW-type spaces).  "Set-up" is everything a user
waits for before the first iteration: for ``ddops`` the METIS decomposition
(``Decomposition.from_matrix(A, block_size=b)``, default subdomain count unless a row says
otherwise), the GDSW coarse basis and the factorisations (:class:`ddops.TwoLevelSchwarz`
with ``coarse_basis="gdsw"`` and the null space); for pyamg the smoothed-aggregation
hierarchy (``B`` = the rigid body modes for elasticity).  "Peak MiB" is the growth of the
resident set from the loaded problem to the end of the solve (``VmHWM`` after resetting it),
so it counts what the method holds and its set-up temporaries, and not ``A``.

Sections (``--sections``):

``targets``
    The problems of the issue that asked for this: 3D linear elasticity (scikit-fem vector
    P1 on the tetrahedra of a 4 x 1 x 1 beam clamped at ``x = 0``, ``fem_elasticity_3d(25,
    length=4)``, 227,448 unknowns, rigid body modes), 3D Poisson ``100^3`` and 2D Poisson
    ``1000^2`` (finite differences).  Rows: the defaults (GDSW additive, ``local_solver=
    "auto"``: PARDISO when installed), the hybrid variant, float32 local factors
    (``factor_dtype``), SuperLU local solves (the previous default), the inexact local
    solver (one aggregation-AMG V-cycle), the inexact local solver with the inexact
    extension, RGDSW in the hybrid form with the inexact local solver (also keeping only
    the extension's orderings for ``update``, ``extension_reuse="ordering"``), and pyamg
    SA; for 2D and 3D Poisson also the box decompositions of 31 x 31 and 10 x 10 x 10
    boxes (``Decomposition.from_grid``), for 3D elasticity the defaults and the leanest
    row on parts from recursive coordinate bisection of the nodes (``partitioner="rcb"``,
    the mesh's coordinates).  Target lines compare
    each ``ddops`` row with SA (total time within 2x in 3D, 1.5x in 2D; peak memory within
    2x, 3x for 3D elasticity; at most 60 iterations) and, with ``--petsc-python``, 3D
    elasticity with PETSc GAMG (total time within 3x); GAMG (the rigid body modes as its
    near-null space) and BoomerAMG then have rows of their own, on the same matrix and
    right-hand side (``benchmarks/petsc_setup_peers.py``; their peak memory is not measured).
``sizes``
    Total time against the subdomain size for each local solver (superlu, pardiso, amg) on
    3D Poisson ``60^3``, 2D Poisson ``500^2`` and 3D elasticity (``fem_elasticity_3d(12,
    length=3)``): the best size per solver.
``huge``
    3D Poisson ``216^3`` (10,077,696 unknowns): time and memory, with the defaults but
    ``--huge-local-solver`` (default ``amg``: PARDISO's factors of 5000 subdomains would
    take about 10 GiB of this machine's 24).

PETSc GAMG and hypre are not installed here: their rows say so (pyamg SA is the peer).
Tables go to standard output, everything to ``--json`` (default ``results/cost3d.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import (  # noqa: E402
    add_json_flag,
    add_quick_flag,
    add_threads_flag,
    check_petsc_python,
    machine_summary,
    reset_peak,
    run_petsc_peers,
)

#: (label, options) of the targets rows; options go to the child process.
TARGET_ROWS = [
    ("ddops GDSW additive (defaults)", {}),
    ("ddops GDSW hybrid", {"variant": "hybrid"}),
    ("ddops GDSW additive, float32 local factors", {"factor_dtype": "float32"}),
    ("ddops GDSW, SuperLU local solves", {"local_solver": "superlu",
                                          "extension_solver": "superlu"}),
    ("ddops GDSW, amg local solves", {"local_solver": "amg"}),
    ("ddops GDSW, amg local solves + amg extension", {"local_solver": "amg",
                                                      "extension_solver": "amg"}),
    # the leanest exact-coarse configuration: a smaller coarse space (RGDSW), applied
    # multiplicatively (fewer iterations), the local solves one AMG V-cycle
    ("ddops RGDSW hybrid, amg local solves", {"coarse_basis": "rgdsw", "variant": "hybrid",
                                              "local_solver": "amg"}),
    # the same, keeping only the extension's orderings for update(), not PARDISO's analyses
    ("ddops RGDSW hybrid, amg local solves, kept orderings",
     {"coarse_basis": "rgdsw", "variant": "hybrid", "local_solver": "amg",
      "extension_reuse": "ordering"}),
    # without algebraic overlap (the parts themselves): in 3D the overlap's layer makes the
    # stacked subdomain matrices 1.4-1.6 times A and buys no iterations with these spaces
    ("ddops GDSW additive, overlap 0", {"overlap": 0}),
    ("ddops RGDSW hybrid, amg local solves, kept orderings, overlap 0",
     {"coarse_basis": "rgdsw", "variant": "hybrid", "local_solver": "amg",
      "extension_reuse": "ordering", "overlap": 0}),
    ("pyamg SA", {"method": "sa"}),
]

#: Rows with recursive coordinate bisection of the nodes (``partitioner="rcb"``), for the
#: problems that have coordinates (the finite-difference ones have box rows instead).
RCB_ROWS = {"elasticity3d": [
    ("ddops GDSW additive, RCB parts", {"partitioner": "rcb"}),
    ("ddops RGDSW hybrid, amg local solves, kept orderings, RCB parts",
     {"coarse_basis": "rgdsw", "variant": "hybrid", "local_solver": "amg",
      "extension_reuse": "ordering", "partitioner": "rcb"}),
    ("ddops RGDSW hybrid, amg local solves, kept orderings, RCB parts, overlap 0",
     {"coarse_basis": "rgdsw", "variant": "hybrid", "local_solver": "amg",
      "extension_reuse": "ordering", "partitioner": "rcb", "overlap": 0}),
]}

#: The box decompositions of the issue's table (``Decomposition.from_grid``), full size only.
BOX_ROWS = {"poisson2d": ("ddops GDSW additive, 31 x 31 boxes", {"boxes": [31, 31]}),
            "poisson3d": ("ddops GDSW additive, 10 x 10 x 10 boxes", {"boxes": [10, 10, 10]})}

PROBLEMS = {
    # name: (builder, arguments, quick arguments)
    "elasticity3d": ("elasticity3d", {"n": 25, "length": 4.0}, {"n": 10, "length": 3.0}),
    "poisson3d": ("poisson3d", {"n": 100}, {"n": 40}),
    "poisson2d": ("poisson2d", {"n": 1000}, {"n": 300}),
}


# -- the child: one measurement in a fresh process ----------------------------------------
def _build(kind: str, args: dict) -> tuple[Any, Any, int, Any]:
    """The matrix, its null space (or None), its block size and its nodes' coordinates
    (None for the finite-difference problems: their rows use box decompositions)."""
    import ddops

    if kind == "elasticity3d":
        from ddops.problems.fem import fem_elasticity_3d

        A, X = fem_elasticity_3d(args["n"], length=args["length"])
        return A.tocsr(), ddops.rigid_body_modes(X), 3, X
    if kind == "poisson3d":
        return ddops.poisson_3d(args["n"]), None, 1, None
    return ddops.poisson_2d(args["n"]), None, 1, None


def _rss_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(spec: dict) -> dict:
    import numpy as np
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    import ddops
    from ddops.precond.options import coarse_options_from_dict

    data = np.load(spec["problem_file"], allow_pickle=False)
    A = sp.csr_matrix((data["data"], data["indices"], data["indptr"]),
                      shape=tuple(data["shape"]))
    Z = data["Z"] if data["Z"].size else None
    b_size = int(data["block_size"])
    # A 1 (the default, as in the earlier tables) or a random vector (--rhs random): the
    # solution of A 1 is the constant vector, nearly in the GDSW-type coarse spaces (a
    # translation), which favours them; with non-overlapping parts and exact local solves
    # the hybrid form even converges in one iteration, measuring nothing
    rhs = (np.random.default_rng(0).standard_normal(A.shape[0])
           if spec.get("rhs") == "random" else A @ np.ones(A.shape[0]))
    exact = reset_peak()
    base = _rss_mib("VmRSS")
    out: dict[str, Any] = {"unknowns": int(A.shape[0])}
    start, cpu_start = time.perf_counter(), time.process_time()
    if spec.get("method") == "sa":
        import pyamg

        ml = pyamg.smoothed_aggregation_solver(A, B=Z)
        M = ml.aspreconditioner()
        out.update(levels=len(ml.levels), operator_complexity=float(ml.operator_complexity()))
    else:
        if spec.get("boxes"):  # a box decomposition of the structured grid
            side = round(A.shape[0] ** (1 / len(spec["boxes"])))
            d = ddops.Decomposition.from_grid((side,) * len(spec["boxes"]), spec["boxes"])
        elif spec.get("partitioner") == "rcb":  # the nodes' coordinates, bisected
            d = ddops.Decomposition.from_matrix(A, spec.get("subdomains"),
                                                spec.get("overlap", 1), block_size=b_size,
                                                partitioner="rcb", coordinates=data["X"])
        else:
            d = ddops.Decomposition.from_matrix(A, spec.get("subdomains"),
                                                spec.get("overlap", 1), block_size=b_size)
        t_dec = time.perf_counter() - start
        options = {}
        if spec.get("extension_solver"):
            options["extension_solver"] = spec["extension_solver"]
        coarse = spec.get("coarse_basis", "gdsw")
        M = ddops.TwoLevelSchwarz(A, d, options=ddops.SchwarzOptions(
            coarse=coarse, null_space=Z, variant=spec.get("variant", "additive"),
            local_solver=spec.get("local_solver", "auto"),
            factor_dtype=spec.get("factor_dtype", "float64"),
            extension_reuse=spec.get("extension_reuse", "analysis"),
            **coarse_options_from_dict(coarse, options)))
        st = M.stats
        out.update(subdomains=d.num_subdomains, coarse_dim=M.coarse_dim,
                   sparse_solver=M.sparse_solver, decomposition_seconds=t_dec,
                   coarse_basis_seconds=st["coarse_basis_seconds"],
                   local_setup_seconds=st["local_setup_seconds"],
                   coarse_setup_seconds=st["coarse_setup_seconds"],
                   held_mib={k: v / 2**20 for k, v in st.items() if k.endswith("_bytes")})
    out["setup_seconds"] = time.perf_counter() - start
    iterations = [0]

    def count(_):
        iterations[0] += 1

    start = time.perf_counter()
    x, info = spla.cg(A, rhs, rtol=1e-8, maxiter=2000, M=M, callback=count)
    out["solve_seconds"] = time.perf_counter() - start
    out["total_seconds"] = out["setup_seconds"] + out["solve_seconds"]
    out["total_cpu_seconds"] = time.process_time() - cpu_start  # all the process's threads
    out["iterations"] = iterations[0]
    out["info"] = int(info)
    out["residual"] = float(np.linalg.norm(rhs - A @ x) / np.linalg.norm(rhs))
    peak = _rss_mib("VmHWM")
    out["peak_mib"] = peak - base if exact else float("nan")
    return out


# -- the parent ------------------------------------------------------------------------------
def _save_problem(kind: str, args: dict, directory: str) -> tuple[str, int]:
    import numpy as np

    A, Z, b, X = _build(kind, args)
    path = os.path.join(directory, f"{kind}_{'_'.join(map(str, args.values()))}.npz")
    np.savez(path, data=A.data, indices=A.indices, indptr=A.indptr,
             shape=np.array(A.shape), Z=np.zeros((0, 0)) if Z is None else Z, block_size=b,
             X=np.zeros((0, 0)) if X is None else X)
    return path, int(A.shape[0])


def _measure(spec: dict, threads: int, repeat: int) -> dict:
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    best = None
    for _ in range(repeat):
        proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)],
                              capture_output=True, text=True, env=env, cwd=os.getcwd())
        if proc.returncode != 0:
            line = (proc.stderr.strip().splitlines() or ["failed"])[-1]
            return {"error": line}
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        if best is None or result["total_seconds"] < best["total_seconds"]:
            best = result
    return best


def _fmt(r: dict, key: str, digits: int = 1) -> str:
    v = r.get(key)
    return "-" if v is None else f"{v:.{digits}f}"


def _petsc_peers(args, path: str, directory: str) -> dict:
    """GAMG's (near-null space given) and BoomerAMG's rows on the problem file ``path``, the
    same right-hand side, CG to 1e-8 (``benchmarks/petsc_setup_peers.py`` in the PETSc
    environment ``args.petsc_python``)."""
    import numpy as np
    import scipy.sparse as sp

    data = np.load(path)
    A = sp.csr_matrix((data["data"], data["indices"], data["indptr"]),
                      shape=tuple(data["shape"]))
    stem = os.path.join(directory, "peers")
    sp.save_npz(f"{stem}_A.npz", A)
    # the child's right-hand side (child())
    np.save(f"{stem}_b.npy", np.random.default_rng(0).standard_normal(A.shape[0])
            if args.rhs == "random" else A @ np.ones(A.shape[0]))
    flags = ["--matrix", f"{stem}_A.npz", "--rhs", f"{stem}_b.npy", "--block-size",
             str(int(data["block_size"])), "--rtol", "1e-8", "--maxiter", "2000"]
    if data["Z"].size:
        np.save(f"{stem}_Z.npy", data["Z"])
        flags += ["--null-space", f"{stem}_Z.npy"]
    return run_petsc_peers(args.petsc_python, flags, args.threads or 1)["rows"]


def section_targets(args, directory: str, results: dict) -> list[str]:
    lines = []
    for name in args.problems:
        kind, full, quick = PROBLEMS[name]
        path, n = _save_problem(kind, quick if args.quick else full, directory)
        rows = []
        rows_here = list(TARGET_ROWS)
        if name in BOX_ROWS and not args.quick:
            rows_here.insert(1, BOX_ROWS[name])
        rows_here[-1:-1] = RCB_ROWS.get(name, [])
        for label, options in rows_here:
            r = _measure({"problem_file": path, "rhs": args.rhs, **options}, args.threads,
                         args.repeat)
            rows.append((label, r))
            print(f"  {name} {label}: {json.dumps(r)}", file=sys.stderr, flush=True)
        results.setdefault("targets", {})[name] = {"unknowns": n, "rows": dict(rows)}
        print(f"\n### {name}: {n:,} unknowns, {args.threads} thread(s), best of {args.repeat}, "
              f"right-hand side {'random' if args.rhs == 'random' else 'A 1'}\n")
        print("| method | N | n0 | iterations | set-up s | solve s | total s | total CPU s | "
              "peak MiB | total / SA | peak / SA |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        sa = dict(rows)["pyamg SA"]
        for label, r in rows:
            if "error" in r:
                print(f"| {label} | failed: {r['error']} |")
                continue
            ratio_t = r["total_seconds"] / sa["total_seconds"] if "error" not in sa else None
            ratio_m = r["peak_mib"] / sa["peak_mib"] if "error" not in sa else None
            print(f"| {label} | {r.get('subdomains', '-')} | {r.get('coarse_dim', '-')} | "
                  f"{r['iterations']} | {_fmt(r, 'setup_seconds')} | "
                  f"{_fmt(r, 'solve_seconds')} | {_fmt(r, 'total_seconds')} | "
                  f"{_fmt(r, 'total_cpu_seconds')} | "
                  f"{_fmt(r, 'peak_mib', 0)} | {ratio_t:.2f} | {ratio_m:.2f} |")
        peers = _petsc_peers(args, path, directory) if args.petsc_python else {}
        results["targets"][name]["peers"] = peers
        for label, r in peers.items():
            total = r["setup_seconds"] + r["solve_seconds"]
            print(f"| {label} | | | {r['iterations']}{'' if r['converged'] else ' (not converged)'}"
                  f" | {r['setup_seconds']:.2f} | {r['solve_seconds']:.2f} | {total:.2f} | "
                  f"{r['setup_cpu_seconds'] + r['solve_cpu_seconds']:.2f} | | "
                  f"{total / sa['total_seconds']:.2f} | |")
        if not peers:
            print("| PETSc GAMG, hypre BoomerAMG | not run (`--petsc-python PYTHON`, the PETSc "
                  "environment of docs/petsc.md) | | | | | | | | | |")
        gamg = peers.get("PETSc GAMG")
        limit = 1.5 if name == "poisson2d" else 2.0
        # peak memory: 2x SA (the earlier targets), 3x for 3D elasticity (the set-up cost's)
        limit_m = 3.0 if name == "elasticity3d" else 2.0
        for label, r in rows:
            if label == "pyamg SA" or "error" in r or "error" in sa:
                continue
            ok_t = r["total_seconds"] <= limit * sa["total_seconds"]
            ok_m = r["peak_mib"] <= limit_m * sa["peak_mib"]
            ok_i = r["iterations"] <= 60
            line = (f"{name} / {label}: total {r['total_seconds'] / sa['total_seconds']:.2f} x "
                    f"SA (target <= {limit}) {'PASS' if ok_t else 'MISS'}; peak "
                    f"{r['peak_mib'] / sa['peak_mib']:.2f} x SA (<= {limit_m:g}) "
                    f"{'PASS' if ok_m else 'MISS'}; {r['iterations']} iterations (<= 60) "
                    f"{'PASS' if ok_i else 'MISS'}")
            if gamg is not None and name == "elasticity3d":
                ratio = r["total_seconds"] / (gamg["setup_seconds"] + gamg["solve_seconds"])
                line += (f"; total {ratio:.2f} x PETSc GAMG (<= 3) "
                         f"{'PASS' if ratio <= 3 else 'MISS'}")
            lines.append(line)
            print(line)
        if "error" not in sa:
            held = {label: r.get("held_mib") for label, r in rows if r.get("held_mib")}
            print("\nheld memory (MiB) of the ddops rows: local factors / coarse factor / "
                  "coarse basis / restrictions")
            for label, h in held.items():
                print(f"  {label}: {h['local_factor_bytes']:.0f} / "
                      f"{h['coarse_factor_bytes']:.0f} / {h['coarse_basis_bytes']:.0f} / "
                      f"{h['restriction_bytes']:.0f}")
    return lines


SIZE_PROBLEMS = {
    "poisson3d": ("poisson3d", {"n": 60}, {"n": 30}, [27, 64, 125, 216, 432, 864]),
    "poisson2d": ("poisson2d", {"n": 500}, {"n": 200}, [32, 64, 125, 250, 500, 1000]),
    "elasticity3d": ("elasticity3d", {"n": 12, "length": 3.0}, {"n": 8, "length": 2.0},
                     [4, 8, 16, 32, 64]),
}


def section_sizes(args, directory: str, results: dict) -> list[str]:
    lines = []
    for name, (kind, full, quick, counts) in SIZE_PROBLEMS.items():
        path, n = _save_problem(kind, quick if args.quick else full, directory)
        if args.quick:
            counts = [c for c in counts if n / c >= 200][:3]
        table = {}
        for solver in ("superlu", "pardiso", "amg"):
            for N in counts:
                r = _measure({"problem_file": path, "subdomains": N, "local_solver": solver},
                             args.threads, args.repeat)
                table[(solver, N)] = r
                print(f"  sizes {name} {solver} N={N}: {json.dumps(r)}", file=sys.stderr,
                      flush=True)
        results.setdefault("sizes", {})[name] = {f"{s}/{N}": r for (s, N), r in table.items()}
        print(f"\n### subdomain size: {name}, {n:,} unknowns (total s / iterations)\n")
        print("| N | unknowns per part | " + " | ".join(("superlu", "pardiso", "amg")) + " |")
        print("|---:|---:|---:|---:|---:|")
        for N in counts:
            cells = []
            for solver in ("superlu", "pardiso", "amg"):
                r = table[(solver, N)]
                cells.append("failed" if "error" in r else
                             f"{r['total_seconds']:.2f} / {r['iterations']}")
            print(f"| {N} | {n // N:,} | " + " | ".join(cells) + " |")
        for solver in ("superlu", "pardiso", "amg"):
            ok = [(table[(solver, N)]["total_seconds"], N) for N in counts
                  if "error" not in table[(solver, N)]]
            if ok:
                t, N = min(ok)
                line = f"{name} / {solver}: best N = {N} ({n // N:,} unknowns per part), {t:.2f} s"
                lines.append(line)
                print(line)
    return lines


def section_huge(args, directory: str, results: dict) -> list[str]:
    n = 40 if args.quick else 216
    path, size = _save_problem("poisson3d", {"n": n}, directory)
    r = _measure({"problem_file": path, "local_solver": args.huge_local_solver}, args.threads,
                 1)
    results["huge"] = r
    print(f"\n### 3D Poisson {n}^3 = {size:,} unknowns, local solver "
          f"{args.huge_local_solver}\n")
    if "error" in r:
        print(f"failed: {r['error']}")
        return [f"huge: failed: {r['error']}"]
    print(json.dumps(r, indent=1))
    line = (f"huge: {size:,} unknowns, N = {r['subdomains']}, {r['iterations']} iterations, "
            f"set-up {r['setup_seconds']:.0f} s, solve {r['solve_seconds']:.0f} s, peak "
            f"{r['peak_mib']:.0f} MiB above the problem")
    print(line)
    return [line]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sections", nargs="+", default=["targets", "sizes"],
                   choices=["targets", "sizes", "huge"])
    p.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    add_quick_flag(p)
    add_threads_flag(p, None)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--rhs", choices=["ones", "random"], default="ones",
                   help="right-hand side of the targets: A 1 (default, as the earlier tables) "
                        "or a random vector (seed 0), which favours no coarse space")
    p.add_argument("--petsc-python", metavar="PYTHON",
                   help="the Python of the PETSc environment (docs/petsc.md, PETSC_DIR set): "
                        "PETSc GAMG and hypre BoomerAMG join the targets' tables, on the same "
                        "matrix and right-hand side")
    p.add_argument("--huge-local-solver", default="amg",
                   choices=["auto", "superlu", "pardiso", "amg"])
    add_json_flag(p, metavar=None)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.petsc_python:
        check_petsc_python(args.petsc_python)
    json_path = args.json or ("results/cost3d_quick.json" if args.quick
                              else "results/cost3d.json")
    print(f"machine: {machine_summary()}; threads {args.threads}")
    results: dict[str, Any] = {"threads": args.threads, "repeat": args.repeat,
                               "quick": args.quick}
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as directory:
        for section in args.sections:
            lines += {"targets": section_targets, "sizes": section_sizes,
                      "huge": section_huge}[section](args, directory, results)
            os.makedirs(os.path.dirname(json_path) or ".", exist_ok=True)
            with open(json_path + ".tmp", "w") as f:
                json.dump(results, f, indent=1, default=str)
            os.replace(json_path + ".tmp", json_path)
    print("\n## summary\n")
    for line in lines:
        print(line)
    print(f"\nwrote {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
