"""Where the two-level set-up goes, phase by phase, beside AMG's whole set-up.

For each problem of the set-up issue, ``ddops precond --coarse all`` runs the coarse spaces (one
BLAS thread, CG to rtol 1e-8) with pyamg's smoothed aggregation and Ruge-Stuben in the
same process, and this script prints from its JSON:

- the split of every two-level set-up by phase (``TwoLevelSchwarz.stats["phases"]``:
  partition, overlap, symbolic, interface, extension, eigenproblems, the rest of the
  coarse basis, extraction, local factorisation, coarse assembly and factorisation);
- the set-up and the set-up + solve of every row (wall and process CPU seconds), and the
  ratios of the adaptive set-ups to GDSW's and of GDSW's to pyamg SA's (the targets of the
  issue: at most 1.5 each).

With ``--petsc-python PYTHON`` (the Python of the PETSc environment of ``docs/petsc.md``,
``PETSC_DIR`` set), ``benchmarks/petsc_setup_peers.py`` runs PETSc's GAMG (near-null space
given) and hypre's BoomerAMG on the same matrix and right-hand side, and their rows join
each table, with the ratio of GDSW's set-up to theirs and the fastest ddops row against the
fastest peer in set-up + solve.

    python benchmarks/setup_profile.py            # the issue's sizes (many minutes)
    python benchmarks/setup_profile.py --quick    # small sizes (about a minute)
    python benchmarks/setup_profile.py --threads 2   # every method on two threads
    python benchmarks/setup_profile.py --petsc-python .petsc-venv/bin/python   # with GAMG
    python benchmarks/setup_profile.py --variant hybrid --factor-dtype float32  # ddops' fastest
    python benchmarks/setup_profile.py --skip-contrast 0   # AGDSW without its indicator
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    add_json_flag,
    add_quick_flag,
    add_threads_flag,
    machine_summary,
    run_petsc_peers,
)

#: (label, ddops precond arguments at the issue's sizes, the same at --quick sizes)
PROBLEMS = [
    ("2D elasticity, stiff inclusions 1e6",
     ["--problem", "elasticity2d", "--n", "159", "--contrast", "1e6", "--subdomains", "128"],
     ["--problem", "elasticity2d", "--n", "31", "--contrast", "1e6", "--subdomains", "8"]),
    ("3D elasticity, stiff inclusions 1e6",
     ["--problem", "elasticity3d", "--n", "18", "--contrast", "1e6", "--subdomains", "64"],
     ["--problem", "elasticity3d", "--n", "7", "--contrast", "1e6", "--subdomains", "8"]),
    ("2D floating channels 1e6",
     ["--problem", "channels2d", "--n", "255", "--contrast", "1e6", "--subdomains", "64"],
     ["--problem", "channels2d", "--n", "63", "--contrast", "1e6", "--subdomains", "16"]),
    # capped: unpreconditioned CG and Jacobi need tens of thousands of iterations there (minutes);
    # their rows then say "not converged" and take no part in the comparison
    ("2D log-normal 1e8",
     ["--problem", "lognormal2d", "--n", "511", "--contrast", "1e8", "--subdomains", "256",
      "--maxiter", "3000"],
     ["--problem", "lognormal2d", "--n", "63", "--contrast", "1e8", "--subdomains", "16",
      "--maxiter", "3000"]),
    ("3D Poisson",
     ["--problem", "poisson3d", "--n", "50"],
     ["--problem", "poisson3d", "--n", "15", "--subdomains", "8"]),
]

PHASES = ("partition", "overlap", "symbolic", "interface", "extension", "eigenproblems",
          "coarse_basis_other", "extraction", "local_factorization", "coarse_assembly",
          "coarse_factorization")
TARGET = 1.5


def run(args: list[str], prefix: str, threads: int = 1) -> dict:
    """One ``ddops precond`` run with ``threads`` BLAS/MKL threads; its JSON."""
    command = [sys.executable, "-m", "ddops", "precond", *args, "--coarse", "all",
               "--blas-threads", str(threads), "--no-plots", "--no-memory", "--no-progress",
               "--save-prefix", prefix]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads))
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode not in (0, 4):  # 4: a row was refused (reported in the table)
        raise SystemExit(f"ddops precond failed ({done.returncode}): {done.stderr[-500:]}")
    return json.loads(Path(f"{prefix}_results.json").read_text())


def report(label: str, result: dict, peers: dict | None = None) -> dict:
    rows = {r["method"]: r for r in result["rows"]}
    print(f"\n### {label}: {result['unknowns']} unknowns, {result['decomposition']}")
    print("\n| method | its | set-up s | set-up CPU s | total s | total CPU s | "
          + " | ".join(PHASES) + " |")
    print("|---|---:|---:|---:|---:|---:|" + "---:|" * len(PHASES))
    out = {"label": label, "unknowns": result["unknowns"], "rows": {}}
    for method, r in rows.items():
        if r.get("status") not in (None, "ok"):
            print(f"| {r['label']} | {r['status']}: {str(r.get('failed'))[:80]} |")
            continue
        total = r["setup_seconds"] + r["solve_seconds"]
        cpu = r["setup_cpu_seconds"] + r["solve_cpu_seconds"]
        phases = dict(r.get("phases") or {})
        if phases:  # ddops precond times its own partition and overlap (in the set-up)
            phases["partition"] = r["setup"]["partition"]
            phases["overlap"] = r["setup"]["overlap"]
        cells = " | ".join(f"{phases[p]:.2f}" if p in phases else "-" for p in PHASES)
        converged = r.get("converged", True)
        its = r["iterations"] if converged else f">{r['iterations']} (not converged)"
        print(f"| {r['label']} | {its} | {r['setup_seconds']:.2f} | "
              f"{r['setup_cpu_seconds']:.2f} | {total:.2f} | {cpu:.2f} | {cells} |")
        if converged:  # a capped run is no time to compare
            out["rows"][method] = {"iterations": r["iterations"], "setup": r["setup_seconds"],
                                   "setup_cpu": r["setup_cpu_seconds"], "total": total,
                                   "total_cpu": cpu, "phases": phases}
    for name, r in (peers or {}).get("rows", {}).items():
        total = r["setup_seconds"] + r["solve_seconds"]
        cpu = r["setup_cpu_seconds"] + r["solve_cpu_seconds"]
        its = r["iterations"] if r["converged"] else f">{r['iterations']} (not converged)"
        print(f"| {name} | {its} | {r['setup_seconds']:.2f} | {r['setup_cpu_seconds']:.2f} | "
              f"{total:.2f} | {cpu:.2f} | " + " | ".join("-" for _ in PHASES) + " |")
        if r["converged"]:
            out["rows"][name] = {"iterations": r["iterations"], "setup": r["setup_seconds"],
                                 "setup_cpu": r["setup_cpu_seconds"], "total": total,
                                 "total_cpu": cpu, "phases": {}, "peer": True}
    gdsw = out["rows"].get("two_level_gdsw")
    sa = out["rows"].get("pyamg")  # smoothed aggregation
    if gdsw:
        for name in ("two_level_agdsw", "two_level_geneo"):
            if name in out["rows"]:
                ratio = out["rows"][name]["setup"] / gdsw["setup"]
                print(f"- {name[10:]} set-up / GDSW's: {ratio:.1f} "
                      f"{'PASS' if ratio <= TARGET else 'MISS'} (target {TARGET})")
        if sa:
            ratio = gdsw["setup"] / sa["setup"]
            print(f"- GDSW set-up / pyamg SA's: {ratio:.1f} "
                  f"{'PASS' if ratio <= TARGET else 'MISS'} (target {TARGET})")
        for name, r in out["rows"].items():
            if r.get("peer"):
                print(f"- GDSW set-up / {name}'s: {gdsw['setup'] / r['setup']:.1f}")
    # the fastest ddops row against the fastest peer (pyamg and PETSc), set-up + solve
    ours = {k: r for k, r in out["rows"].items() if k.startswith(("one_level", "two_level"))}
    theirs = {k: r for k, r in out["rows"].items() if r.get("peer") or k.startswith("pyamg")}
    if ours and theirs:
        best = min(ours, key=lambda k: ours[k]["total"])
        peer = min(theirs, key=lambda k: theirs[k]["total"])
        ratio = ours[best]["total"] / theirs[peer]["total"]
        print(f"- fastest ddops ({best}, {ours[best]['total']:.2f} s) / fastest peer ({peer}, "
              f"{theirs[peer]['total']:.2f} s), set-up + solve: {ratio:.2f} "
              f"({'ddops wins' if ratio < 1 else 'ddops loses'})")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_quick_flag(parser, "small sizes")
    add_json_flag(parser)
    add_threads_flag(parser, "BLAS/MKL threads of every method (default 1; the machine's "
                     "cores for the all-cores table)")
    parser.add_argument("--problems", type=int, nargs="*",
                        help="indices into the problem list (default: all)")
    parser.add_argument("--variant", choices=("additive", "hybrid"), default="additive",
                        help="Schwarz variant of the two-level rows (default additive)")
    parser.add_argument("--factor-dtype", choices=("float64", "float32"), default="float64",
                        help="precision of the local factors (default float64)")
    parser.add_argument("--skip-contrast", type=float, metavar="RATIO",
                        help="AGDSW's skip_contrast (0: every eigenproblem, the full space; "
                        "default: the library's)")
    parser.add_argument("--petsc-python", metavar="PYTHON",
                        help="a Python with petsc4py (docs/petsc.md): adds PETSc GAMG and "
                        "hypre BoomerAMG (benchmarks/petsc_setup_peers.py)")
    args = parser.parse_args(argv)
    print(machine_summary(memory=True, pyamg=True, ddops=True))
    print(f"{args.threads} BLAS/MKL thread(s) for every method; seconds are wall time of one "
          "process (ddops precond), CPU seconds that process's CPU time (all its threads); the "
          "phases are wall seconds; set-up includes the decomposition (partition and overlap)")
    chosen = args.problems if args.problems else range(len(PROBLEMS))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in chosen:
            label, full, quick = PROBLEMS[i]
            flags = quick if args.quick else full
            skip = ([] if args.skip_contrast is None
                    else ["--skip-contrast", str(args.skip_contrast)])
            result = run([*flags, "--variant", args.variant, "--factor-dtype",
                          args.factor_dtype, *skip], str(Path(tmp) / f"p{i}"), args.threads)
            peers = (run_petsc_peers(args.petsc_python, flags, args.threads)
                     if args.petsc_python else None)
            results.append(report(label, result, peers))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
