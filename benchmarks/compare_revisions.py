"""Time the training step of two revisions of ddops in one process, interleaved.

Run from the repository root::

    python benchmarks/compare_revisions.py REV [--sizes 256 1024 8192] [--threads 1]

``REV`` is any git revision (a commit, a tag, ``HEAD~3``).  Its ``ddops``
package is exported with ``git archive`` into a temporary directory under the
name ``ddops_rev`` and imported next to the working tree's ``ddops``.  For
every size both versions build the benchmark configuration (element kind,
``N = n / 32``, ``r = 4``, ``r0 = N - 1``, ``B = 256``, float64) and time, in
alternating rounds, ``value_and_grad_flat`` on one fixed batch ("step": forward,
loss, backward) and ``FourierRHS.sample`` ("data").  Medians over the rounds are
printed with their ratio, so a noisy shared machine affects both sides alike.
"""

from __future__ import annotations

import argparse
import importlib
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
        tar.extractall(into, filter="data")
    os.rename(os.path.join(into, "ddops"), os.path.join(into, "ddops_rev"))


def build(pkg: str, n: int, B: int):
    """Step and data callables of one package for the benchmark configuration."""
    ops = importlib.import_module(pkg + ".operators")
    dec = importlib.import_module(pkg + ".decomposition")
    data = importlib.import_module(pkg + ".data")
    N = n // 32
    op = ops.SchwarzOperator(dec.Decomposition1D(n, N, overlap=2), local_rank=4, seed=0)
    rhs = data.FourierRHS(n)
    rng = np.random.default_rng(1)
    F, U = rhs.sample(B, rng)
    grad = np.empty_like(op.theta)
    return {"step": lambda: op.value_and_grad_flat(F, U, out=grad, check=False),
            "data": lambda: rhs.sample(B, rng, out=(F, U))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rev", help="git revision to compare the working tree with")
    p.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 8192])
    p.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    from threadpoolctl import threadpool_limits

    with tempfile.TemporaryDirectory() as tmp:
        export_revision(args.rev, tmp)
        sys.path[:0] = [tmp, ROOT]
        print(f"ddops_rev = {args.rev}, ddops = working tree; medians of {args.rounds} "
              f"interleaved rounds, {args.threads} BLAS thread(s), ms per call")
        with threadpool_limits(args.threads, user_api="blas"):
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
