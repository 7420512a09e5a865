"""How much faster all cores can make a set-up + solve on this machine, and how much of that
ddops' threads take.

The both-cores target of the set-up issue asks set-up + solve to run at least 1.6 times
faster on two cores than on one.  Whether a machine allows that depends on the work: cores
that share caches and memory bandwidth (and, on a virtual machine, a host) slow each other
down.  For every problem of ``benchmarks/setup_profile.py`` and every method, this script
builds the problem once per process and times ``--repeat`` set-ups + solves (CG to
``rtol = 1e-8``, a random right-hand side of seed 0) three ways, in rounds that alternate
their order:

- *alone*: one process, one thread;
- *side by side*: as many one-thread processes as cores, the same work in each, started
  together (each waits until all have built the problem);
- *threaded*: one process on all cores (``threads=`` of the set-up, the BLAS and MKL
  limits; CG's own vector operations on one BLAS thread, as ``ddops precond`` runs them).

The *ceiling* is the work of the side-by-side copies over their mean time against one
process alone, ``copies * alone / mean(side by side)`` (medians over the repetitions and
rounds): a division of the work among the cores with the same memory traffic gains at
most that much.  The *speed-up* is alone over threaded, and *of it* the share of the
ceiling it reaches.  ``sa`` is pyamg's smoothed aggregation (rigid body modes on
elasticity), serial: its ceiling is the machine's for that work, its speed-up about 1.

    python benchmarks/cores_ceiling.py                          # every problem, gdsw geneo sa
    python benchmarks/cores_ceiling.py --problems 0 --methods geneo --repeat 5
    python benchmarks/cores_ceiling.py --quick                  # small sizes (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_json_flag, add_quick_flag, machine_summary  # noqa: E402

#: the methods a worker can time
METHODS = ("gdsw", "agdsw", "geneo", "sa")
#: the both-cores target of the set-up issue
BOTH_CORES = 1.6
#: seconds a worker waits for the others to build their problem before it gives up
READY_TIMEOUT = 600.0


def ceiling(alone: float, side_by_side: list[float]) -> float:
    """The speed-up that ``len(side_by_side)`` cores can give work that takes ``alone``
    seconds on one core when its copies, one per core, take ``side_by_side`` seconds at
    once: the copies' work over their mean time, ``copies * alone / mean``."""
    return len(side_by_side) * alone / (sum(side_by_side) / len(side_by_side))


def _workload(problem: int, method: str, quick: bool, threads: int):
    """The problem of ``setup_profile.py``'s list, built once, and a function that sets up
    ``method`` and solves by CG (one set-up + solve; returns the iterations and whether CG
    converged)."""
    import numpy as np
    from common import space_options
    from geneo_inertia import PROBLEMS, build
    from scipy.sparse.linalg import cg
    from threadpoolctl import threadpool_limits

    import ddops

    label, full, small, fe = PROBLEMS[problem]
    prob, d = build(small if quick else full)
    A = prob.A.tocsr()
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    neumann = prob.neumann(d) if fe and method in ("agdsw", "geneo") else None

    def once() -> tuple[int, bool]:
        if method == "sa":
            import pyamg

            M = pyamg.smoothed_aggregation_solver(A, B=prob.null_space).aspreconditioner()
        else:
            M = ddops.TwoLevelSchwarz(A, d, options=space_options(prob, method, neumann,
                                                                 threads=threads))
        its = [0]

        def count(_):
            its[0] += 1

        # (CG's vector operations on one BLAS thread: threaded, the BLAS threads spin
        # between calls on the cores the preconditioner's threads need)
        with threadpool_limits(limits=1, user_api="blas"):
            _, info = cg(A, b, M=M, rtol=1e-8, maxiter=20_000, callback=count)
        return its[0], info == 0

    return label, once


def worker(spec: dict) -> None:
    """One process of a measurement: build, say ready, wait for the start, time the
    repetitions, write them (``spec["out"]``)."""
    from ddops.io import atomic_write_json
    from ddops.linalg.local_solvers import thread_limit

    threads = spec["threads"]
    with thread_limit(threads), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (GenEO's cap on small problems)
        label, once = _workload(spec["problem"], spec["method"], spec["quick"], threads)
        Path(spec["out"] + ".ready").touch()
        waited = time.perf_counter()
        while not Path(spec["go"]).exists():
            if time.perf_counter() - waited > READY_TIMEOUT:
                raise SystemExit("cores_ceiling.py: the other workers never got ready")
            time.sleep(0.005)
        start = time.time()
        walls, cpus, its, converged = [], [], [], []
        for _ in range(spec["repeat"]):
            wall, cpu = time.perf_counter(), time.process_time()
            n, ok = once()
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
            its.append(n)
            converged.append(bool(ok))
        atomic_write_json(spec["out"], {"label": label, "walls": walls, "cpus": cpus,
                                        "iterations": its, "converged": converged,
                                        "start": start, "end": time.time()})


def launch(spec: dict, copies: int, tmp: str, tag: str) -> list[dict]:
    """``copies`` workers of ``spec`` started together (each times its repetitions once
    all have built the problem); their results."""
    go = os.path.join(tmp, f"{tag}.go")
    jobs, outs = [], []
    for c in range(copies):
        out = os.path.join(tmp, f"{tag}_{c}.json")
        env = dict(os.environ, OMP_NUM_THREADS=str(spec["threads"]),
                   MKL_NUM_THREADS=str(spec["threads"]),
                   OPENBLAS_NUM_THREADS=str(spec["threads"]))
        log = open(out + ".err", "w+")  # noqa: SIM115 - closed below (a full pipe stalls)
        job = subprocess.Popen([sys.executable, __file__, "--worker",
                                json.dumps(dict(spec, out=out, go=go))],
                               stdout=subprocess.DEVNULL, stderr=log, env=env)
        jobs.append((job, log))
        outs.append(out)
    try:
        while not all(Path(o + ".ready").exists() for o in outs):
            if any(job.poll() not in (None, 0) for job, _ in jobs):
                break  # (a worker died while building: its error below)
            time.sleep(0.01)
        Path(go).touch()
    finally:
        codes = [job.wait() for job, _ in jobs]
    results = []
    for (_, log), code, out in zip(jobs, codes, outs, strict=True):
        log.seek(0)
        err = log.read()
        log.close()
        if code != 0:
            raise SystemExit(f"cores_ceiling.py: a worker failed ({code}): {err[-500:]}")
        results.append(json.loads(Path(out).read_text()))
    return results


def measure(problem: int, method: str, args, cores: int, tmp: str) -> dict:
    """The three ways of one (problem, method), in ``args.rounds`` rounds."""
    spec = {"problem": problem, "method": method, "quick": args.quick,
            "repeat": args.repeat}
    ways = {"alone": (1, 1), "side by side": (1, cores), "threaded": (cores, 1)}
    got = {way: [] for way in ways}
    label = None
    for r in range(args.rounds):
        order = list(ways) if r % 2 == 0 else list(ways)[::-1]
        for way in order:
            threads, copies = ways[way]
            out = launch(dict(spec, threads=threads), copies, tmp,
                         f"p{problem}_{method}_{r}_{way.replace(' ', '_')}")
            got[way].append(out)
            label = out[0]["label"]

    def median(way: str, copy: int = 0, key: str = "walls") -> float:
        """A process's median over its repetitions and the rounds."""
        return statistics.median(t for run in got[way] for t in run[copy][key])

    alone, threaded = median("alone"), median("threaded")
    side = [median("side by side", c) for c in range(cores)]
    bound = ceiling(alone, side)
    speed = alone / threaded
    its = {way: sorted({i for run in runs for out in run for i in out["iterations"]})
           for way, runs in got.items()}
    overlap = min(min(out["end"] for out in run) - max(out["start"] for out in run)
                  for run in got["side by side"])
    converged = all(ok for runs in got.values() for run in runs for out in run
                    for ok in out["converged"])
    return {"problem": label, "method": method, "cores": cores, "alone": alone,
            "alone_cpu": median("alone", key="cpus"), "side_by_side": side,
            "threaded": threaded, "threaded_cpu": median("threaded", key="cpus"),
            "converged": converged, "ceiling": bound, "speedup": speed,
            "share": speed / bound, "iterations": its, "overlap_seconds": overlap,
            "walls": {way: [run[c]["walls"] for run in runs for c in range(len(run))]
                      for way, runs in got.items()}}


def main(argv: list[str] | None = None) -> int:
    from geneo_inertia import PROBLEMS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_quick_flag(parser, "small sizes")
    add_json_flag(parser)
    parser.add_argument("--problems", type=int, nargs="*",
                        help="indices into setup_profile.py's problems (default: all)")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=["gdsw", "geneo", "sa"])
    parser.add_argument("--repeat", type=int, default=3,
                        help="set-ups + solves per process and round (default 3)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds of the three ways, their order alternating (default 2)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return 0
    if args.repeat < 1 or args.rounds < 1:
        parser.error("--repeat and --rounds must be at least 1")
    problems = range(len(PROBLEMS)) if args.problems is None else args.problems
    wrong = [i for i in problems if not 0 <= i < len(PROBLEMS)]
    if wrong:
        parser.error(f"--problems: {wrong} not in 0..{len(PROBLEMS) - 1}")
    cores = os.cpu_count() or 1
    print(machine_summary(memory=True, pyamg=True, ddops=True))
    print(f"\n{cores} cores; seconds of one set-up + solve (median of {args.repeat} per "
          f"process x {args.rounds} rounds); the ceiling = {cores} x alone / mean(side by "
          f"side); wall seconds, process CPU seconds in brackets; the both-cores target: "
          f"speed-up >= {BOTH_CORES}\n")
    print("| problem | method | its | alone s (CPU) | side by side s | ceiling | threaded s "
          "(CPU) | speed-up | of the ceiling |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    from ddops.io import atomic_write_json

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in problems:
            for method in args.methods:
                row = measure(i, method, args, cores, tmp)
                rows.append(row)
                seen = sorted({n for v in row["iterations"].values() for n in v})
                its = "/".join(map(str, seen)) if len(seen) <= 2 else f"{seen[0]}-{seen[-1]}"
                if not row["converged"]:
                    its += " (not all converged)"
                print(f"| {row['problem']} | {method} | {its} | {row['alone']:.3f} "
                      f"({row['alone_cpu']:.3f}) | "
                      f"{' / '.join(f'{s:.3f}' for s in row['side_by_side'])} | "
                      f"{row['ceiling']:.2f} | {row['threaded']:.3f} "
                      f"({row['threaded_cpu']:.3f}) | {row['speedup']:.2f} | "
                      f"{row['share']:.0%} |", flush=True)
                if args.json:
                    atomic_write_json(args.json, rows, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
