"""Time two revisions of ddops in one process, interleaved: the training step, or the
two-level set-up.

Run from the repository root::

    python benchmarks/compare_revisions.py REV [--sizes 256 1024 8192] [--threads 1]
    python benchmarks/compare_revisions.py REV --setup [--coarse geneo] [--problems 0 1]

``REV`` is any git revision (a commit, a tag, ``HEAD~3``).  Its ``ddops``
package is exported with ``git archive`` into a temporary directory under the
name ``ddops_rev`` and imported next to the working tree's ``ddops``.

The training step: for every size both versions build the benchmark configuration
(element kind, ``N = n / 32``, ``r = 4``, ``r0 = N - 1``, ``B = 256``, float64) and
time, in alternating rounds, ``value_and_grad_flat`` on one fixed batch ("step":
forward, loss, backward) and ``FourierRHS.sample`` ("data").  Medians over the rounds
are printed with their ratio, so a noisy shared machine affects both sides alike.

``--setup``: for every problem of ``setup_profile.py`` (``--quick``: its small sizes)
each version builds the problem and its decomposition with its own code (the matrices
are checked equal) and times ``TwoLevelSchwarz`` with ``--coarse`` (GenEO on elasticity
with the finite-element Neumann matrices), after one untimed set-up per side, in rounds
that alternate which side goes first, under ``--threads`` threads of every pool: the
best set-up, its CPU seconds and its eigenproblems per side, their ratio, whether
both gave the same coarse dimension (exit 1 where not), and pyamg SA's set-up on the
same matrix in the same rounds (the peer).  A revision git cannot export: exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def export_revision(rev: str, into: str) -> None:
    """Write ``ddops/`` of ``rev`` to ``into/ddops_rev`` (a second, importable package)."""
    archive = os.path.join(into, "rev.tar")
    subprocess.run(["git", "-C", ROOT, "archive", "--format=tar", "-o", archive, rev, "ddops"],
                   check=True)
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # (Python 3.10.12 / 3.11.4 and later)
            tar.extractall(into, filter="data")
        else:  # pragma: no cover - older Pythons; the archive is git's own
            tar.extractall(into)
    os.rename(os.path.join(into, "ddops"), os.path.join(into, "ddops_rev"))


def build(pkg: str, n: int, B: int):
    """Step and data callables of one package for the benchmark configuration."""
    lib = importlib.import_module(pkg)
    N = n // 32
    op = lib.SchwarzOperator(lib.Decomposition1D(n, N, overlap=2), local_rank=4, seed=0)
    rhs = lib.FourierRHS(n)
    rng = np.random.default_rng(1)
    F, U = rhs.sample(B, rng)
    grad = np.empty_like(op.theta)
    return {"step": lambda: op.value_and_grad_flat(F, U, out=grad, check=False),
            "data": lambda: rhs.sample(B, rng, out=(F, U))}


def setup_side(pkg: str, settings: dict, coarse: str, fe: bool):
    """One version's set-up of one problem: a function that builds ``TwoLevelSchwarz``
    (the problem and its decomposition built once, by that version's code), and the
    problem."""
    lib = importlib.import_module(pkg)
    config = importlib.import_module(pkg + ".experiments.precond.config")
    registry = importlib.import_module(pkg + ".experiments.precond.problem_registry")
    c = config.PrecondConfig(**settings).validated()
    prob = registry.build_problem(c)
    d, _, _ = registry.decompose(c, prob)
    extra = {}
    neumann = getattr(prob, "neumann", None)  # (older revisions have none)
    if coarse == "geneo" and fe and neumann is not None:
        extra["geneo"] = lib.GenEOOptions(neumann=neumann(d))
    options = lib.SchwarzOptions(coarse=coarse, null_space=prob.null_space, **extra)
    return (lambda: lib.TwoLevelSchwarz(prob.A, d, options=options)), prob


def compare_setups(args) -> list[dict]:
    """The ``--setup`` table (see the module notes); its rows."""
    from common import timed_sa_setup
    from geneo_inertia import PROBLEMS

    try:  # the peer beside every row, in the same rounds
        import pyamg  # noqa: F401
        peer = True
    except ImportError:  # pragma: no cover - pyamg is a test dependency
        peer = False
    picked = range(len(PROBLEMS)) if args.problems is None else args.problems
    rows = []
    print(f"ddops_rev = {args.rev}, ddops = working tree; {args.coarse} set-up, best of "
          f"{args.rounds} interleaved rounds (after one untimed set-up each; the first side "
          f"alternating), {args.threads} thread(s), seconds\n")
    print(f"| problem | {args.rev} set-up (CPU) | eigenproblems | working tree set-up (CPU) "
          "| eigenproblems | speed-up | same coarse dim | pyamg SA set-up (CPU) |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    for i in picked:
        label, full, quick, fe = PROBLEMS[i]
        settings = quick if args.quick else full
        sides = {name: setup_side(pkg, settings, args.coarse, fe)
                 for name, pkg in (("rev", "ddops_rev"), ("tree", "ddops"))}
        A, B = sides["rev"][1].A, sides["tree"][1].A
        if A.shape != B.shape or abs(A - B).max() != 0:
            raise SystemExit(f"compare_revisions.py: the two revisions build different "
                             f"matrices for {label!r}; their set-ups do not compare")
        for build_one, _ in sides.values():  # (first calls: imports, libraries' set-up)
            build_one()
        best: dict[str, tuple] = {}
        sa = None
        for r in range(max(args.rounds, 1)):
            for name in (("rev", "tree") if r % 2 == 0 else ("tree", "rev")):
                build_one = sides[name][0]
                wall, cpu = time.perf_counter(), time.process_time()
                M = build_one()
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                out = (wall, cpu, M.stats["phases"].get("eigenproblems", 0.0), M.coarse_dim)
                if name not in best or out[0] < best[name][0]:
                    best[name] = out
                del M
            if peer:
                _, wall, cpu = timed_sa_setup(sides["tree"][1])
                sa = (wall, cpu) if sa is None or wall < sa[0] else sa
        (a, ac, ae, ad), (b, bc, be, bd) = best["rev"], best["tree"]
        rows.append({"problem": label, "rev": args.rev, "rev_setup": a, "rev_cpu": ac,
                     "rev_eigen": ae, "tree_setup": b, "tree_cpu": bc, "tree_eigen": be,
                     "speedup": a / b, "same_dim": ad == bd,
                     "sa_setup": None if sa is None else sa[0],
                     "sa_cpu": None if sa is None else sa[1]})
        print(f"| {label} | {a:.3f} ({ac:.3f}) | {ae:.3f} | {b:.3f} ({bc:.3f}) | {be:.3f} | "
              f"{a / b:.2f}x | {'yes' if ad == bd else f'NO ({ad} / {bd})'} | "
              f"{'-' if sa is None else f'{sa[0]:.3f} ({sa[1]:.3f})'} |", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rev", help="git revision to compare the working tree with")
    p.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 8192])
    p.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--setup", action="store_true",
                   help="time the two-level set-up on setup_profile.py's problems instead")
    p.add_argument("--coarse", default="geneo",
                   choices=["gdsw", "rgdsw", "agdsw", "geneo", "nicolaides"],
                   help="--setup: the coarse space (default geneo)")
    p.add_argument("--problems", type=int, nargs="+",
                   help="--setup: indices into setup_profile.py's problems (default all)")
    p.add_argument("--quick", action="store_true", help="--setup: the problems' small sizes")
    p.add_argument("--json", help="--setup: write the rows here")
    args = p.parse_args(argv)
    from threadpoolctl import threadpool_limits

    if args.setup and args.problems is not None:
        from geneo_inertia import PROBLEMS

        wrong = [i for i in args.problems if not 0 <= i < len(PROBLEMS)]
        if wrong:
            p.error(f"--problems: {wrong} not in 0..{len(PROBLEMS) - 1}")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            export_revision(args.rev, tmp)
        except subprocess.CalledProcessError:
            print(f"compare_revisions.py: git cannot export ddops/ at {args.rev!r}",
                  file=sys.stderr)
            return 2
        saved = list(sys.path)
        sys.path[:0] = [tmp, ROOT, os.path.join(ROOT, "benchmarks")]
        try:
            if args.setup:
                with threadpool_limits(args.threads):
                    rows = compare_setups(args)
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump(rows, f, indent=1)
                return 0 if all(r["same_dim"] for r in rows) else 1
            print(f"ddops_rev = {args.rev}, ddops = working tree; medians of {args.rounds} "
                  f"interleaved rounds, {args.threads} BLAS thread(s), ms per call")
            with threadpool_limits(args.threads, user_api="blas"):
                compare_training(args)
        finally:
            for name in [m for m in sys.modules if m == "ddops_rev" or
                         m.startswith("ddops_rev.")]:
                del sys.modules[name]
            sys.path[:] = saved
    return 0


def compare_training(args) -> None:
    """The training step's table (see the module notes)."""
    for n in args.sizes:
        impl = {"rev": build("ddops_rev", n, 256), "tree": build("ddops", n, 256)}
        reps = max(3, 16384 // n)
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for name, fns in impl.items():
                for what, fn in fns.items():
                    fn()
                    t = time.perf_counter()
                    for _ in range(reps):
                        fn()
                    times.setdefault((name, what), []).append(
                        (time.perf_counter() - t) / reps * 1e3)
        for what in ("step", "data"):
            a = float(np.median(times[("rev", what)]))
            b = float(np.median(times[("tree", what)]))
            print(f"n={n:<6} {what:4s}  {args.rev}: {a:9.3f}  working tree: {b:9.3f}  "
                  f"speed-up {a / b:5.2f}x", flush=True)


if __name__ == "__main__":
    sys.exit(main())
