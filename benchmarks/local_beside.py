"""The subdomains' numeric factorisation beside the coarse space, and before it.

For every problem of ``setup_profile.py`` (the set-up issue's), ``ddops.TwoLevelSchwarz``
(GDSW, AGDSW and GenEO; ``--coarse`` to choose; the adaptive spaces with the
finite-element Neumann matrices on elasticity) set up with ``threads=1``, and with
``threads=2`` once with the local numeric factorisation on a thread of its own beside the
coarse space (``ddops.precond.corrections.LOCAL_BESIDE_COARSE``) and once before it (the
flag off), each under ``threadpool_limits`` of its thread count.  The three set-ups and
pyamg's smoothed aggregation set-up (one thread; rigid body modes on elasticity)
alternate in rounds, best of ``--repeat``; the decomposition is built once per problem and
not timed.  Prints each set-up (wall / process CPU seconds),
the speed-ups (before / beside on two threads; one thread / two beside), the seconds the
numeric factorisation ran on its thread (``stats["local_beside_seconds"]``), and whether
the two-thread preconditioners apply the same bit for bit.  Needs PARDISO
(``ddops[solvers]``) and two cores: elsewhere nothing runs beside and the rows are the same.

    python benchmarks/local_beside.py                  # the six problems (a few minutes)
    python benchmarks/local_beside.py --problems 0 1 --coarse gdsw --repeat 5
    python benchmarks/local_beside.py --quick          # small sizes
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agdsw_indicator import add_round_flags, chosen_problems  # noqa: E402
from common import machine_summary, space_options, timed_setup  # noqa: E402
from shared_order import sa_setup  # noqa: E402

WAYS = ("one thread", "two, before", "two, beside")


def main(argv=None) -> int:
    from threadpoolctl import threadpool_limits

    from ddops.precond import corrections

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_flags(parser)
    parser.add_argument("--coarse", nargs="*", default=["gdsw", "agdsw", "geneo"],
                        choices=["gdsw", "agdsw", "geneo"],
                        help="the coarse spaces (default: all three)")
    args = parser.parse_args(argv)
    print(machine_summary(memory=True, ddops=True))
    print(f"set-up wall / CPU s, best of {args.repeat} alternating rounds (the decomposition "
          "not timed); beside s: the numeric local factorisation on its thread\n")
    print("| problem | coarse | one thread | two, before | two, beside | before / beside | "
          "one / beside | beside s | same M | pyamg SA set-up |")
    print("|---|---|---|---|---|---:|---:|---:|---|---:|")
    out = []
    for label, prob, d, neumann in chosen_problems(args):
        x = np.random.default_rng(0).standard_normal((prob.A.shape[0], 2))
        for coarse in args.coarse:
            best: dict = {}
            applied = {}
            try:
                for _ in range(max(args.repeat, 1)):
                    for way in (*WAYS, "sa"):
                        threads = 2 if way.startswith("two") else 1
                        if way == "sa":
                            with threadpool_limits(1):
                                r = sa_setup(prob)
                        else:
                            corrections.LOCAL_BESIDE_COARSE = way == "two, beside"
                            # (the process's BLAS pools too: no thread of the last set-up
                            # spins in the CPU time of a one-thread one)
                            with threadpool_limits(threads):
                                M, wall, cpu = timed_setup(prob, d, space_options(
                                    prob, coarse, neumann, threads))
                            r = {"setup": wall, "setup_cpu": cpu,
                                 "beside": float(M.stats["local_beside_seconds"]),
                                 "coarse_dim": int(M.coarse_dim)}
                            applied[way] = M @ x
                            del M
                        if way not in best or r["setup"] < best[way]["setup"]:
                            best[way] = r
            finally:
                corrections.LOCAL_BESIDE_COARSE = True
            one, before, beside, sa = (best[w] for w in (*WAYS, "sa"))
            same = bool(np.array_equal(applied["two, before"], applied["two, beside"]))
            apart = float(np.abs(applied["one thread"] - applied["two, beside"]).max()
                          / np.abs(applied["one thread"]).max())
            print(f"| {label}, {prob.A.shape[0]:,} unknowns | {coarse} ({one['coarse_dim']}) | "
                  f"{one['setup']:.3f} / {one['setup_cpu']:.3f} | "
                  f"{before['setup']:.3f} / {before['setup_cpu']:.3f} | "
                  f"{beside['setup']:.3f} / {beside['setup_cpu']:.3f} | "
                  f"{before['setup'] / beside['setup']:.2f} | "
                  f"{one['setup'] / beside['setup']:.2f} | {beside['beside']:.3f} | "
                  f"{'bit for bit' if same else 'NO'} (one thread: {apart:.1e}) | "
                  f"{sa['setup']:.3f} / {sa['setup_cpu']:.3f} |", flush=True)
            out.append({"problem": label, "coarse": coarse, "one": one, "before": before,
                        "beside": beside, "sa": sa, "same": same, "one_thread_apart": apart})
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
