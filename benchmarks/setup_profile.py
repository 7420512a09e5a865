"""Where the two-level set-up goes, phase by phase, beside AMG's whole set-up.

For each problem of the set-up issue, ``ddops precond --coarse all`` runs the coarse spaces (one
BLAS thread, CG to rtol 1e-8) with pyamg's smoothed aggregation and Ruge-Stuben in the
same process, and this script prints from its JSON:

- the split of every two-level set-up by phase (``TwoLevelSchwarz.stats["phases"]``:
  partition, overlap, symbolic, interface, extension, eigenproblems, the rest of the
  coarse basis, extraction, local factorisation, coarse assembly and factorisation);
- the set-up and the set-up + solve of every row (wall and process CPU seconds), and the
  ratios of the adaptive set-ups to GDSW's and of GDSW's to pyamg SA's (the targets of the
  issue: at most 1.5 each);
- the races, with PASS/MISS: on elasticity with stiff inclusions ddops' fastest two-level row
  at least 2x faster in set-up + solve than each of pyamg SA, PETSc GAMG and hypre BoomerAMG;
  on the scalar high-contrast problems within 3x of BoomerAMG and ahead of SA and GAMG;
- with ``--both-cores``, every problem also on all the machine's cores and the speed-up of
  every row (the target: at least 1.6 for ddops);
- at the end, every target of the run in one list.

With ``--petsc-python PYTHON`` (the Python of the PETSc environment of ``docs/petsc.md``,
``PETSC_DIR`` set), ``benchmarks/petsc_setup_peers.py`` runs PETSc's GAMG (near-null space
given) and hypre's BoomerAMG on the same matrix and right-hand side, and their rows join
each table, with the ratio of GDSW's set-up to theirs and the fastest ddops row against the
fastest peer in set-up + solve.  ``--petsc-python`` is checked before the first run.

A failed run (ddops' or the peers') is reported on its problem's line and the other
problems still run (exit status 1); ``--json PATH`` is rewritten, atomically, after every
problem, so that a run stopped later keeps what it measured.

    python benchmarks/setup_profile.py            # the issue's sizes (many minutes)
    python benchmarks/setup_profile.py --quick    # small sizes (about a minute)
    python benchmarks/setup_profile.py --threads 2   # every method on two threads
    python benchmarks/setup_profile.py --both-cores  # one thread and all cores, the speed-ups
    python benchmarks/setup_profile.py --petsc-python .petsc-venv/bin/python   # with GAMG
    python benchmarks/setup_profile.py --variant hybrid --factor-dtype float32  # ddops' fastest
    python benchmarks/setup_profile.py --skip-contrast 0   # AGDSW without its indicator
    python benchmarks/setup_profile.py --problems 0 --variant hybrid \
        --precond-args "--partitioner rcb --subdomains 96 --threshold 0.05"  # another set-up
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    add_json_flag,
    add_quick_flag,
    add_threads_flag,
    check_petsc_python,
    machine_summary,
    run_petsc_peers,
)

#: (label, kind, ddops precond arguments at the issue's sizes, the same at --quick sizes); the
#: kind says which of the issue's targets a problem carries (:func:`race_targets`)
PROBLEMS = [
    ("2D elasticity, stiff inclusions 1e6", "elasticity",
     ["--problem", "elasticity2d", "--n", "159", "--contrast", "1e6", "--subdomains", "128"],
     ["--problem", "elasticity2d", "--n", "31", "--contrast", "1e6", "--subdomains", "8"]),
    ("3D elasticity, stiff inclusions 1e6", "elasticity",
     ["--problem", "elasticity3d", "--n", "18", "--contrast", "1e6", "--subdomains", "64"],
     ["--problem", "elasticity3d", "--n", "7", "--contrast", "1e6", "--subdomains", "8"]),
    ("2D floating channels 1e6", "scalar",
     ["--problem", "channels2d", "--n", "255", "--contrast", "1e6", "--subdomains", "64"],
     ["--problem", "channels2d", "--n", "63", "--contrast", "1e6", "--subdomains", "16"]),
    # capped: unpreconditioned CG and Jacobi need tens of thousands of iterations there (minutes);
    # their rows then say "not converged" and take no part in the comparison
    ("2D log-normal 1e8", "scalar",
     ["--problem", "lognormal2d", "--n", "511", "--contrast", "1e8", "--subdomains", "256",
      "--maxiter", "3000"],
     ["--problem", "lognormal2d", "--n", "63", "--contrast", "1e8", "--subdomains", "16",
      "--maxiter", "3000"]),
    ("3D Poisson", "poisson",
     ["--problem", "poisson3d", "--n", "50"],
     ["--problem", "poisson3d", "--n", "15", "--subdomains", "8"]),
    ("3D inclusions 1e6", "scalar",
     ["--problem", "inclusions3d", "--n", "39", "--contrast", "1e6", "--maxiter", "3000"],
     ["--problem", "inclusions3d", "--n", "11", "--contrast", "1e6", "--subdomains", "8",
      "--maxiter", "3000"]),
]

PHASES = ("partition", "overlap", "symbolic", "interface", "extension", "eigenproblems",
          "coarse_basis_other", "extraction", "local_factorization", "coarse_assembly",
          "coarse_factorization")
TARGET = 1.5
#: Elasticity with stiff inclusions: ddops' fastest two-level row at least this many times
#: faster in set-up + solve than each peer (pyamg SA, PETSc GAMG, hypre BoomerAMG) ...
RACE_ELASTICITY = 2.0
#: ... in 2D from this many unknowns, in 3D from :data:`RACE_ELASTICITY_3D_SIZE`
RACE_ELASTICITY_2D_SIZE = 50_000
RACE_ELASTICITY_3D_SIZE = 100_000
#: Scalar high contrast: within this factor of BoomerAMG's set-up + solve, and ahead of
#: pyamg SA and PETSc GAMG
RACE_SCALAR = 3.0
#: Both cores: set-up + solve at least this many times faster than on one
BOTH_CORES = 1.6
#: the peers of the races, by their row names
SA, GAMG, BOOMERAMG = "pyamg", "PETSc GAMG", "hypre BoomerAMG"
#: how a run of ``ddops precond`` or of the peers fails: its exit status (SystemExit, with
#: its message), or a results file or output that cannot be read
RUN_FAILURES = (SystemExit, OSError, ValueError, IndexError, KeyError)


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


def report(label: str, kind: str, result: dict, peers: dict | None = None) -> dict:
    rows = {r["method"]: r for r in result["rows"]}
    print(f"\n### {label}: {result['unknowns']} unknowns, {result['decomposition']}")
    print("\n| method | its | set-up s | set-up CPU s | total s | total CPU s | "
          + " | ".join(PHASES) + " |")
    print("|---|---:|---:|---:|---:|---:|" + "---:|" * len(PHASES))
    out = {"label": label, "kind": kind, "unknowns": result["unknowns"], "rows": {}}
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
        # (a capped run is no time to compare, but a lower bound on a peer's)
        out["rows"][method] = {"iterations": r["iterations"], "setup": r["setup_seconds"],
                               "setup_cpu": r["setup_cpu_seconds"], "total": total,
                               "total_cpu": cpu, "phases": phases, "converged": converged}
    for name, r in (peers or {}).get("rows", {}).items():
        total = r["setup_seconds"] + r["solve_seconds"]
        cpu = r["setup_cpu_seconds"] + r["solve_cpu_seconds"]
        its = r["iterations"] if r["converged"] else f">{r['iterations']} (not converged)"
        print(f"| {name} | {its} | {r['setup_seconds']:.2f} | {r['setup_cpu_seconds']:.2f} | "
              f"{total:.2f} | {cpu:.2f} | " + " | ".join("-" for _ in PHASES) + " |")
        out["rows"][name] = {"iterations": r["iterations"], "setup": r["setup_seconds"],
                             "setup_cpu": r["setup_cpu_seconds"], "total": total,
                             "total_cpu": cpu, "phases": {}, "peer": True,
                             "converged": r["converged"]}
    done = {k: r for k, r in out["rows"].items() if r["converged"]}
    gdsw = done.get("two_level_gdsw")
    sa = done.get(SA)  # smoothed aggregation
    records = []
    if gdsw:
        for name, what, other in ([(f"{n[10:]} set-up / GDSW's", n, gdsw) for n in (
                "two_level_agdsw", "two_level_geneo") if n in done]
                + ([("GDSW set-up / pyamg SA's", "two_level_gdsw", sa)] if sa else [])):
            ratio = done[what]["setup"] / other["setup"]
            print(f"- {name}: {ratio:.1f} {'PASS' if ratio <= TARGET else 'MISS'} "
                  f"(target {TARGET})")
            records.append({"target": name, "value": ratio, "pass": bool(ratio <= TARGET)})
        for name, r in done.items():
            if r.get("peer"):
                print(f"- GDSW set-up / {name}'s: {gdsw['setup'] / r['setup']:.1f}")
    # the fastest ddops row against the fastest peer (pyamg and PETSc), set-up + solve
    ours = {k: r for k, r in done.items() if k.startswith(("one_level", "two_level"))}
    theirs = {k: r for k, r in done.items() if r.get("peer") or k.startswith("pyamg")}
    if ours and theirs:
        best = min(ours, key=lambda k: ours[k]["total"])
        peer = min(theirs, key=lambda k: theirs[k]["total"])
        ratio = ours[best]["total"] / theirs[peer]["total"]
        print(f"- fastest ddops ({best}, {ours[best]['total']:.2f} s) / fastest peer ({peer}, "
              f"{theirs[peer]['total']:.2f} s), set-up + solve: {ratio:.2f} "
              f"({'ddops wins' if ratio < 1 else 'ddops loses'})")
    out["targets"] = records + race_targets(out, kind, label.startswith("3D"))
    return out


def race_targets(out: dict, kind: str, three_d: bool) -> list[dict]:
    """The races of the issue on one problem, printed with PASS/MISS and returned as records.

    ddops' entry is its fastest two-level row in set-up + solve (the best robust
    configuration of the run).  ``kind`` "elasticity": at least :data:`RACE_ELASTICITY`
    times faster than each of pyamg SA, PETSc GAMG and hypre BoomerAMG (the size the target
    names is checked and a smaller problem said); "scalar": within :data:`RACE_SCALAR` of
    BoomerAMG and ahead of SA and GAMG; "poisson": none (its target is the set-up ratio).
    A peer that did not converge counts with its capped time, a lower bound of its own.
    """
    rows = out["rows"]
    ours = {k: r for k, r in rows.items() if k.startswith("two_level") and r["converged"]}
    if kind not in ("elasticity", "scalar") or not ours:
        return []
    best = min(ours, key=lambda k: ours[k]["total"])
    t = ours[best]["total"]
    records = []

    def line(what: str, value: float, target: str, ok: bool, note: str = "") -> None:
        print(f"- {what}: {value:.2f} {'PASS' if ok else 'MISS'} (target {target}){note}")
        records.append({"target": what, "value": value, "pass": bool(ok)})

    size = ""
    if kind == "elasticity":
        least = RACE_ELASTICITY_3D_SIZE if three_d else RACE_ELASTICITY_2D_SIZE
        if out["unknowns"] < least:
            size = f"; {out['unknowns']:,} unknowns, the target names >= {least:,}"
    for peer in (SA, GAMG, BOOMERAMG):
        r = rows.get(peer)
        if r is None:
            print(f"- {peer}: not run" + ("" if peer == SA else " (no --petsc-python)"))
            continue
        capped = "" if r["converged"] else f"; {peer} did not converge, its capped time"
        if kind == "elasticity":
            ratio = r["total"] / t
            line(f"{peer} set-up + solve / ddops' fastest ({best})", ratio,
                 f">= {RACE_ELASTICITY:g}", ratio >= RACE_ELASTICITY, capped + size)
            continue
        # scalar: within RACE_SCALAR of BoomerAMG, ahead of the others
        ratio = t / r["total"]
        ok = ratio <= RACE_SCALAR if peer == BOOMERAMG else ratio < 1
        line(f"ddops' fastest ({best}) set-up + solve / {peer}'s", ratio,
             f"<= {RACE_SCALAR:g}" if peer == BOOMERAMG else "< 1", ok, capped)
    return records


def both_cores(label: str, one: dict, many: dict, threads: int) -> list[dict]:
    """The both-cores target of one problem: every two-level row's (and peer's) set-up +
    solve on one thread over the same on ``threads``, PASS/MISS for ddops' rows (at least
    :data:`BOTH_CORES`), printed and returned as records."""
    print(f"\n#### {label}: set-up + solve on 1 thread / on {threads} "
          f"(wall seconds)\n")
    print("| method | 1 thread s | its | " + f"{threads} threads s | its | speed-up |")
    print("|---|---:|---:|---:|---:|---:|")
    records = []
    for name, r in one["rows"].items():
        other = many["rows"].get(name)
        mine = name.startswith("two_level")
        if not (mine or r.get("peer") or name.startswith("pyamg")) or other is None:
            continue
        if not (r["converged"] and other["converged"]):
            continue
        speed = r["total"] / other["total"]
        verdict = ("PASS" if speed >= BOTH_CORES else "MISS") if mine else "(peer)"
        print(f"| {name} | {r['total']:.2f} | {r['iterations']} | {other['total']:.2f} | "
              f"{other['iterations']} | {speed:.2f} {verdict} |")
        if mine:
            records.append({"target": f"{name} both cores", "value": speed,
                            "pass": bool(speed >= BOTH_CORES)})
    return records


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
    parser.add_argument("--precond-args", metavar="ARGS", default="",
                        help="more `ddops precond` flags for every problem, one string "
                        "(after the problem's own, so that they win: for example "
                        "\"--partitioner rcb --threshold 0.1\"); the peers keep the problem's")
    parser.add_argument("--both-cores", action="store_true",
                        help="run every problem on one thread and on all the machine's "
                        "cores (--threads is ignored) and print the both-cores target: "
                        f"set-up + solve at least {BOTH_CORES}x faster")
    args = parser.parse_args(argv)
    from ddops.io import atomic_write_json

    if args.petsc_python:
        check_petsc_python(args.petsc_python)
    cores = os.cpu_count() or 1
    thread_counts = [1, cores] if args.both_cores else [args.threads]
    print(machine_summary(memory=True, pyamg=True, ddops=True))
    print(f"{' and '.join(map(str, thread_counts))} BLAS/MKL thread(s) for every method; "
          "seconds are wall time of one process (ddops precond), CPU seconds that process's "
          "CPU time (all its threads); the phases are wall seconds; set-up includes the "
          "decomposition (partition and overlap)")
    chosen = args.problems if args.problems else range(len(PROBLEMS))
    results, failed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in chosen:
            label, kind, full, quick = PROBLEMS[i]
            flags = quick if args.quick else full
            skip = ([] if args.skip_contrast is None
                    else ["--skip-contrast", str(args.skip_contrast)])
            runs = []
            for threads in thread_counts:
                shown = label if len(thread_counts) == 1 else f"{label} ({threads} thread(s))"
                # (a failed run, ddops' or the peers', is reported and the run goes on with
                # the next problem: the problems before it stay measured)
                try:
                    result = run([*flags, "--variant", args.variant, "--factor-dtype",
                                  args.factor_dtype, *skip, *shlex.split(args.precond_args)],
                                 str(Path(tmp) / f"p{i}_{threads}"), threads)
                except RUN_FAILURES as failure:
                    print(f"\n### {shown}: {failure}")
                    failed.append(shown)
                    break
                try:
                    peers = (run_petsc_peers(args.petsc_python, flags, threads)
                             if args.petsc_python else None)
                except RUN_FAILURES as failure:
                    print(f"\n{shown}: {failure}; the table without the PETSc peers")
                    failed.append(f"{shown} (PETSc peers)")
                    peers = None
                runs.append(report(shown, kind, result, peers))
                runs[-1]["threads"] = threads
            if args.both_cores and len(runs) == 2:
                runs[0]["both_cores"] = both_cores(label, runs[0], runs[1], cores)
            results += runs
            if args.json and results:  # what is measured so far, after every problem
                atomic_write_json(args.json, results, indent=1)
    print("\n### The targets (one thread, and the speed-ups on all cores)\n")
    for r in results:
        if r["threads"] != thread_counts[0]:
            continue  # (the targets are on one thread unless said)
        for t in r.get("targets", []) + r.get("both_cores", []):
            print(f"- {r['label']}: {t['target']} {t['value']:.2f} "
                  f"{'PASS' if t['pass'] else 'MISS'}")
    if failed:
        print(f"\nfailed: {'; '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
