"""Time per data-parallel training step: 1 rank (the serial Trainer) against P MPI ranks.

The model is the Schwarz model of ``ddops scaling`` at size ``n`` (1D,
N = n / 32 subdomains, local rank 4, interface hats) or of ``ddops compare
--problem poisson2d`` (``--problem 2d``: an n x n grid in (n / 16)^2 boxes,
overlap 1, GDSW, tensor-product Fourier data with 8 frequencies per
direction); coarse rank n0, batch 256, AdamW, the plateau scheduler.  The serial baseline is
:class:`ddops.learning.training.Trainer` in one process; the parallel run is
:class:`ddops.distributed.training.DataParallelTrainer` under
``mpiexec -n P``.  Runs alternate (1, P, 1, P, ...) so that the load of a
shared machine affects both alike; every run times ``--steps`` steps after
``--warmup`` steps (the slowest rank counts), and the report gives the median
over ``--rounds`` and the speed-up, with the split of a step into drawing the
batch and forward/backward (the part that is divided over the ranks), the
``Allreduce`` of the gradient and the optimiser update (both repeated on every
rank)::

    OMP_NUM_THREADS=1 python benchmarks/distributed_training.py --problem 1d --n 131072
    OMP_NUM_THREADS=1 python benchmarks/distributed_training.py --problem 2d --n 256

``OMP_NUM_THREADS`` (default 1 when unset) is passed to every process and
printed; the trainer also limits the BLAS to ``blas_threads=1`` per process.
Before and after the runs, two single-thread GEMM loops run alone and then at
the same time: the cores' worth they get together (2.00 on two free cores) is
printed with the load average, since on a machine shared with other work it
bounds any two-rank speed-up measured in the same minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _trainer(problem: str, n: int, batch: int, comm: Any = None, coarse_rank: Any = None):
    """The model: 1D as ``ddops scaling``, 2D as ``ddops compare --problem poisson2d``."""
    from ddops import Decomposition, Decomposition1D, SchwarzOperator, coarse_basis, poisson_2d
    from ddops.learning.data import FourierRHS, make_rhs_sampler
    from ddops.learning.training import Trainer, TrainingConfig

    if problem == "1d":
        d = Decomposition1D(n, max(2, n // 32), 2)
        op = SchwarzOperator(d, local_rank=4, coarse_rank=coarse_rank)
        sampler: Any = FourierRHS(n)
    else:
        A = poisson_2d(n)
        parts = max(1, n // 16)
        d = Decomposition.from_grid((n, n), (parts, parts), overlap=1)
        op = SchwarzOperator(d, local_rank=4, coarse_basis=coarse_basis(d, "gdsw", A=A),
                             coarse_rank=coarse_rank)
        # the data of ddops compare --problem poisson2d: 8 frequencies per direction
        sampler = make_rhs_sampler(A, shape=(n, n), kind="fourier", modes=8)
    config = TrainingConfig(steps=10**9, batch_size=batch, progress=False, val_every=10**9)
    if comm is None:
        return Trainer(op, sampler, config)
    from ddops.distributed.training import DataParallelTrainer

    return DataParallelTrainer(op, sampler, config, comm=comm)


def worker(problem: str, n: int, batch: int, steps: int, warmup: int, serial: bool,
           coarse_rank: Any = None) -> dict[str, Any]:
    """One timed run (every rank); rank 0's dictionary holds the slowest rank's numbers."""
    comm = None
    if not serial:
        from ddops.distributed import world

        comm = world()
    trainer = _trainer(problem, n, batch, comm, coarse_rank)
    op = trainer.op
    trainer.run(warmup)  # allocate and touch every buffer
    if comm is not None:
        comm.Barrier()
    before = dict(trainer.seconds)
    trainer.run(warmup + steps)
    # the trainer's own clock: the steps, not the check of the replicas at the end of a run
    step = (trainer.seconds["total"] - before["total"]) / steps
    data = (trainer.seconds["data"] - before["data"]) / steps
    # the parts, timed apart: this rank's forward/backward, the reduction, the update
    F, U = trainer.sampler.sample(batch, np.random.default_rng(0))
    F, U = F.astype(op.dtype), U.astype(op.dtype)
    lo, hi = (0, batch) if comm is None else trainer.columns
    F, U = np.ascontiguousarray(F[:, lo:hi]), np.ascontiguousarray(U[:, lo:hi])
    grad = np.empty_like(op.theta)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        t0 = time.perf_counter()
        for _ in range(steps):
            op.value_and_grad_flat(F, U, out=grad, check=False)
        forward_backward = (time.perf_counter() - t0) / steps
        grad *= 1e-12  # a small update of the trained parameters
        t0 = time.perf_counter()
        for _ in range(steps):
            trainer.optimizer.step([grad])
        update = (time.perf_counter() - t0) / steps
    reduce = 0.0
    if comm is not None:
        from ddops.distributed import mpi

        buf = np.zeros(op.theta.size + 1, dtype=op.dtype)
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(steps):
            comm.Allreduce(mpi().IN_PLACE, buf)
        reduce = (time.perf_counter() - t0) / steps
    out = {"step": step, "data": data, "forward_backward": forward_backward,
           "allreduce": reduce, "update": update}
    if comm is not None:
        from ddops.distributed import mpi

        out = {k: comm.allreduce(v, op=mpi().MAX) for k, v in out.items()}
    out.update(ranks=1 if comm is None else comm.Get_size(), params=int(op.theta.size),
               problem=problem, n=n, batch=batch, unknowns=int(op.shape[0]),
               subdomains=int(op.decomposition.num_subdomains), coarse_dim=int(op.coarse_dim),
               coarse_rank=int(op.coarse_rank))
    return out


_PROBE = """
import time, numpy as np
from threadpoolctl import threadpool_limits
a, b = np.random.rand(2048, 2048), np.random.rand(2048, 256)
with threadpool_limits(1):
    a @ b
    t = time.perf_counter()
    for _ in range(20):
        a @ b
    print((time.perf_counter() - t) / 20)
"""


def parallel_capacity(env: dict[str, str]) -> float:
    """Cores' worth of GEMM throughput two processes get at once (2.0 on two free cores).

    One single-thread GEMM loop alone, then two at the same time:
    ``2 t_alone / t_together``.  On a machine shared with other work this is
    the ceiling of any two-rank speed-up measured in the same minutes.
    """
    def run(count: int) -> list[float]:
        procs = [subprocess.Popen([sys.executable, "-c", _PROBE], stdout=subprocess.PIPE,
                                  text=True, env=env) for _ in range(count)]
        return [float(p.communicate()[0]) for p in procs]

    alone = run(1)[0]
    together = max(run(2))
    return 2 * alone / together


def _launch(ranks: int, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    script = str(Path(__file__).resolve())
    flags = ["--worker", "--problem", args.problem, "--n", str(args.n), "--batch",
             str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup)]
    if args.coarse_rank is not None:
        flags += ["--coarse-rank", str(args.coarse_rank)]
    if ranks == 1:
        command = [sys.executable, script, *flags, "--serial"]
    else:
        mpiexec = Path(sys.executable).parent / "mpiexec"
        command = [str(mpiexec) if mpiexec.exists() else "mpiexec", "-n", str(ranks),
                   sys.executable, script, *flags]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--problem", choices=("1d", "2d"), default="1d",
                   help="1d: the scaling model (N = n/32 subdomains, interface hats); 2d: "
                   "Poisson on an n x n grid, (n/16)^2 boxes, GDSW, as ddops compare "
                   "--problem poisson2d (default 1d)")
    p.add_argument("--n", type=int, help="elements of the 1D problem (default 131072) or "
                   "points per direction in 2D (default 256)")
    p.add_argument("--batch", type=int, default=256, help="batch size (default 256)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per run (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    p.add_argument("--rounds", type=int, default=3, help="alternating runs per rank count "
                   "(default 3)")
    p.add_argument("--ranks", type=int, nargs="+", default=[2], help="MPI rank counts compared "
                   "with the serial trainer (default 2)")
    p.add_argument("--coarse-rank", type=int, help="coarse rank r0 (default n0, as ddops "
                   "scaling and compare): the coarse factors hold 2 n0 r0 of the parameters "
                   "that every step reduces and updates on every rank")
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--serial", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.n is None:
        args.n = 131072 if args.problem == "1d" else 256
    if args.worker:
        if args.serial:
            result = worker(args.problem, args.n, args.batch, args.steps, args.warmup, True,
                            args.coarse_rank)
            print(json.dumps(result))
            return 0
        from ddops.distributed import guard, world

        with guard():
            result = worker(args.problem, args.n, args.batch, args.steps, args.warmup, False,
                            args.coarse_rank)
        if world().Get_rank() == 0:
            print(json.dumps(result))
        return 0
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    print(f"{args.problem} n={args.n}, batch {args.batch}, {args.steps} timed steps after "
          f"{args.warmup}, {args.rounds} rounds, OMP_NUM_THREADS={env['OMP_NUM_THREADS']}, "
          f"blas_threads=1, {os.cpu_count()} cores")
    load_before = os.getloadavg()[0]
    capacity = [parallel_capacity(env)]
    runs: dict[int, list[dict[str, Any]]] = {1: [], **{P: [] for P in args.ranks}}
    for _ in range(args.rounds):
        for P in runs:
            runs[P].append(_launch(P, args, env))
    keys = ("step", "data", "forward_backward", "allreduce", "update")
    summary = {P: {k: statistics.median(r[k] for r in rs) for k in keys}
               for P, rs in runs.items()}
    capacity.append(parallel_capacity(env))
    load = (load_before, os.getloadavg()[0])
    print(f"load average (1 min) before/after: {load[0]:.1f} / {load[1]:.1f}; two concurrent "
          f"single-thread GEMMs ran at {capacity[0]:.2f} / {capacity[1]:.2f} cores' worth "
          f"(2.00 on two free cores: the ceiling of a two-rank speed-up now)")
    first = runs[1][0]
    print(f"{first['unknowns']} unknowns, {first['subdomains']} subdomains, n0 = "
          f"{first['coarse_dim']}, r0 = {first['coarse_rank']}, {first['params']} parameters")
    print("ranks | ms/step | speed-up | data | fwd+bwd (this rank) | allreduce | update")
    for P, s in summary.items():
        ratios = [a["step"] / b["step"] for a, b in zip(runs[1], runs[P])]
        print(f"{P:5d} | {1e3 * s['step']:7.0f} | {summary[1]['step'] / s['step']:5.2f}x "
              f"(rounds {', '.join(f'{r:.2f}' for r in ratios)}) | {1e3 * s['data']:.0f} | "
              f"{1e3 * s['forward_backward']:.0f} | {1e3 * s['allreduce']:.0f} | "
              f"{1e3 * s['update']:.0f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": {str(k): v for k, v in runs.items()},
                                               "median": {str(k): v for k, v in
                                                          summary.items()},
                                               "omp_num_threads": env["OMP_NUM_THREADS"],
                                               "load_average": load,
                                               "parallel_capacity": capacity},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
