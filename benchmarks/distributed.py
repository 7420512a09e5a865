"""GDSW-preconditioned CG on 2D Poisson: 1 rank against P MPI ranks, and a model to 1000 ranks.

The problem: :func:`ddops.problems.poisson_2d` with ``n^2`` unknowns (default
``n = 1000``: 10^6), :meth:`ddops.Decomposition.from_grid` with ``parts x
parts`` boxes (default 32 x 32 = 1024 subdomains of about 31 x 31 points),
overlap 1, GDSW coarse space, additive variant, CG to ``rtol = 1e-8`` from a
random right-hand side.  Each run is one ``mpiexec -n P`` job of this script
(``--worker``); runs alternate ``1, P, 1, P, ...`` so that the load of a
shared machine affects both alike, and the report gives the median over
``--rounds``.  Reported per run (the slowest rank's time):

* the set-up split: problem and decomposition (every rank), layout, local
  factorisations, coarse basis (serial code on every rank, see
  :mod:`ddops.distributed.precond`), coarse matrix; the solve; CG iterations;
* the time of one product with ``A``, one preconditioner application and its
  parts (local solve, coarse solve) averaged over ``--applies`` calls;
* the communication the layout counts per preconditioner application and
  per CG iteration: messages and bytes (summed over the ranks), reductions;
* with ``P = 1`` also the serial reference, :class:`ddops.TwoLevelSchwarz`
  with :func:`scipy.sparse.linalg.cg` in the same process (the same
  iterations).

Then a latency-bandwidth model (``alpha`` per message, ``beta`` per byte)
projects a CG iteration to 1000 ranks, strong scaling of this problem and weak
scaling at one subdomain per rank, with the coarse solve's growth, and names
the rank count where the coarse solve dominates.  ``alpha`` and ``beta`` are
measured here by a ping-pong between two ranks and printed beside typical
cluster values.  Run::

    OMP_NUM_THREADS=1 python benchmarks/distributed.py --n 1000 --parts 32 --ranks 2

``OMP_NUM_THREADS`` (default 1 when unset) is passed to every rank and
printed, and every rank limits its BLAS to one thread (threadpoolctl).
``--json FILE`` writes every number.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Typical cluster parameters for the model beside the measured ones: 2 us per message
#: (InfiniBand, inter-node) and 10 GB/s per link.
CLUSTER_ALPHA = 2e-6
CLUSTER_BETA = 1 / 10e9


def _timed(comm, fn, repeats: int = 1) -> float:
    """Slowest rank's mean seconds of ``fn()`` over ``repeats`` calls."""
    from ddops.distributed import mpi

    comm.Barrier()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    seconds = (time.perf_counter() - start) / repeats
    return float(comm.allreduce(seconds, op=mpi().MAX))


def _pingpong(comm) -> dict[str, float]:
    """Latency (8-byte round trip / 2) and bandwidth (8 MB) between ranks 0 and 1."""
    from ddops.distributed import mpi

    MPI = mpi()
    out = {}
    if comm.Get_size() < 2:
        return out
    rank = comm.Get_rank()
    for size, key, reps in ((1, "alpha", 2000), (2**20, "beta", 20)):
        buf = np.zeros(size)
        comm.Barrier()
        start = MPI.Wtime()
        for _ in range(reps):
            if rank == 0:
                comm.Send(buf, 1)
                comm.Recv(buf, 1)
            elif rank == 1:
                comm.Recv(buf, 0)
                comm.Send(buf, 0)
        half = (MPI.Wtime() - start) / (2 * reps)
        out[key] = half if key == "alpha" else half / (8 * size)
    out = comm.bcast(out, root=0)
    return out


def worker(n: int, parts: int, rtol: float, applies: int, serial: bool) -> dict[str, Any]:
    """One run on every rank of ``COMM_WORLD``; the returned numbers are the slowest rank's."""
    import scipy.sparse.linalg as spla
    from threadpoolctl import threadpool_limits

    import ddops
    from ddops.distributed import DistributedLayout, DistributedMatrix, mpi, world
    from ddops.distributed.krylov import cg
    from ddops.distributed.precond import DistributedTwoLevelSchwarz

    threadpool_limits(1)
    comm = world()
    MPI = mpi()
    rank, size = comm.Get_rank(), comm.Get_size()

    def slowest(seconds: float) -> float:
        return float(comm.allreduce(seconds, op=MPI.MAX))

    r: dict[str, Any] = {"ranks": size, "n": n, "parts": parts, "num_dofs": n * n}
    start = time.perf_counter()
    A = ddops.poisson_2d(n)
    d = ddops.Decomposition.from_grid((n, n), (parts, parts), overlap=1)
    r["problem_seconds"] = slowest(time.perf_counter() - start)
    start = time.perf_counter()
    layout = DistributedLayout(d, comm, A=A)
    Ad = DistributedMatrix(layout)
    r["layout_seconds"] = slowest(time.perf_counter() - start)
    comm.Barrier()
    start = time.perf_counter()
    M = DistributedTwoLevelSchwarz(layout, A, "gdsw", variant="additive")
    r["setup_seconds"] = slowest(time.perf_counter() - start)
    r["local_factorisation_seconds"] = slowest(M.local.setup_seconds)
    r["coarse_basis_seconds"] = slowest(M.coarse_basis_seconds)
    r["coarse_matrix_seconds"] = slowest(M.coarse_matrix_seconds)
    r["coarse_dim"] = M.coarse_dim
    r["coarse_solver"] = M.coarse_solver
    r["local_solver"] = M.local.local_solver
    r["subdomains_per_rank"] = int(comm.allreduce(layout.local_subdomains.size, op=MPI.MAX))
    r["plan"] = comm.gather(layout.plan_summary(), root=0)

    rng = np.random.default_rng(0)
    b_global = rng.standard_normal(n * n)
    b = layout.scatter(b_global)
    # per-operation times and counts
    layout.reset_stats()
    M.matvec(b)
    r["per_apply"] = {k: int(comm.allreduce(v)) if k in ("messages", "bytes") else v
                      for k, v in layout.stats.items()}
    layout.reset_stats()
    Ad.matvec(b)
    r["per_matvec"] = {k: int(comm.allreduce(v)) if k in ("messages", "bytes") else v
                       for k, v in layout.stats.items()}
    r["apply_seconds"] = _timed(comm, lambda: M.matvec(b), applies)
    r["matvec_seconds"] = _timed(comm, lambda: Ad.matvec(b), applies)
    x_region = np.zeros(layout.region.size)
    r["local_solve_seconds"] = _timed(comm, lambda: M.local.matvec(x_region), applies)
    c = np.zeros(M.coarse_dim)
    r["coarse_solve_seconds"] = _timed(comm, lambda: M.coarse_solve(c), applies)
    r["allreduce_coarse_seconds"] = _timed(comm, lambda: layout.allreduce(c), applies)
    r["allreduce_scalar_seconds"] = _timed(comm, lambda: layout.allreduce(np.zeros(2)),
                                           10 * applies)
    r["halo_seconds"] = _timed(comm, lambda: layout.update_ghosts(b), applies)
    r["pingpong"] = _pingpong(comm)

    iterations = [0]

    def count(_: Any) -> None:
        iterations[0] += 1

    layout.reset_stats()
    comm.Barrier()
    start, cpu = time.perf_counter(), time.process_time()
    x, info = cg(Ad, b, rtol=rtol, M=M, callback=count)
    r["solve_seconds"] = slowest(time.perf_counter() - start)
    # CPU seconds of the solve on the busiest rank: the work a rank does (MPI's busy waiting
    # included); on a machine shared with other jobs it falls with P even when wall time can't
    r["solve_cpu_seconds"] = slowest(time.process_time() - cpu)
    r["iterations"], r["info"] = iterations[0], int(info)
    r["solve_stats"] = {k: int(comm.allreduce(v)) if k in ("messages", "bytes") else v
                        for k, v in layout.stats.items()}
    residual = layout.norm(b - Ad.matvec(x)) / layout.norm(b)
    r["relative_residual"] = residual

    if serial and size == 1:  # the serial library in the same process
        from ddops.precond.schwarz import TwoLevelSchwarz

        start = time.perf_counter()
        Ms = TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant="additive")
        r["serial_setup_seconds"] = time.perf_counter() - start
        its = [0]
        start = time.perf_counter()
        spla.cg(A, b_global, rtol=rtol, M=Ms,
                callback=lambda _: its.__setitem__(0, its[0] + 1))
        r["serial_solve_seconds"] = time.perf_counter() - start
        r["serial_iterations"] = its[0]
        r["serial_apply_seconds"] = min(
            _timed(comm, lambda: Ms.matvec(b_global), applies) for _ in range(1))
    return r if rank == 0 else {}


# -- the model -----------------------------------------------------------------------------
def gdsw_coarse_problem(width: int, parts: int):
    """``(A, d, A0)``: 2D Poisson on ``parts x parts`` boxes of ``width^2`` points and its GDSW
    coarse matrix ``A0 = Phi^T A Phi`` (CSR, sorted indices)."""
    import ddops

    n = width * parts
    A = ddops.poisson_2d(n)
    d = ddops.Decomposition.from_grid((n, n), (parts, parts), overlap=1)
    Phi = ddops.coarse_basis(d, "gdsw", A=A)
    A0 = (Phi.T @ A @ Phi).tocsr()
    A0.sort_indices()
    return A, d, A0


def coarse_growth(width: int, parts_list: list[int], repeats: int = 20) -> list[dict[str, Any]]:
    """GDSW coarse dimension, factorisation and solve time against ``N`` at fixed ``H/h``.

    ``parts x parts`` boxes of ``width x width`` points (one process, the
    redundant work of every rank): the coarse basis, ``A_0 = Phi^T A Phi``, the
    sparse factorisation (as :class:`~ddops.distributed.precond.DistributedTwoLevelSchwarz`
    does above 2000 coarse functions) and one solve.
    """
    from ddops.linalg.local_solvers import superlu_chunk

    rows = []
    for parts in parts_list:
        _, _, A0 = gdsw_coarse_problem(width, parts)
        A0 = A0.tocsc()
        start = time.perf_counter()
        lu, _ = superlu_chunk(A0, np.arange(A0.shape[0]), True, np.float64)  # pivots checked
        factor = time.perf_counter() - start
        c = np.ones(A0.shape[0])
        start = time.perf_counter()
        for _ in range(repeats):
            lu.solve(c)
        rows.append({"N": parts * parts, "n0": int(A0.shape[0]), "nnz_A0": int(A0.nnz),
                     "nnz_factor": int(lu.nnz), "factor_seconds": factor,
                     "solve_seconds": (time.perf_counter() - start) / repeats})
    return rows


def power_fit(rows: list[dict[str, Any]], key: str) -> tuple[float, float]:
    """``t = a n0^e`` by least squares in log-log: ``(a, e)``."""
    x = np.log([r["n0"] for r in rows])
    y = np.log([r[key] for r in rows])
    e, loga = np.polyfit(x, y, 1)
    return float(np.exp(loga)), float(e)


def model(one: dict[str, Any], two: dict[str, Any], alpha: float, beta: float,
          ranks: list[int], growth: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Time of one CG iteration at ``P`` ranks: strong scaling of the measured problem.

    ``t(P) = t_local(1) / P + t_coarse + t_comm(P)`` with ``t_local(1)`` the
    measured one-rank time of a matvec plus the local solve plus the coarse
    products (everything that is divided over the ranks); ``t_coarse`` the
    redundant coarse solve (``n0`` fixed; from :func:`coarse_growth`'s fit, the
    same numbers as the weak-scaling model); and ``t_comm`` three halo
    exchanges (two in ``M``, one in ``A``) with the neighbour count and bytes
    of a 2D block arrangement of ranks, plus three reductions (two scalar ones,
    one of ``n0`` values) of ``ceil(log2 P)`` latency steps and ``2 beta``
    bytes each.
    """
    n = one["num_dofs"]
    a_s, e_s = power_fit(growth, "solve_seconds")
    t_coarse = a_s * one["coarse_dim"] ** e_s
    t_divided = one["matvec_seconds"] + one["apply_seconds"] - one["coarse_solve_seconds"]
    # ghost entries per rank at P = 2 (strips): one interface of length sqrt(n) per rank
    width = two["per_apply"]["bytes"] / 2 / 8 / math.sqrt(n) / 2 if two else 2.0
    n0 = one["coarse_dim"]
    rows = []
    for P in ranks:
        side = math.sqrt(n / P)  # a square block of unknowns per rank
        neighbours = 0 if P == 1 else 8
        halo_bytes = 0 if P == 1 else 8 * (4 * side * width + 4 * width * width)
        t_halo = 3 * (neighbours * alpha + beta * halo_bytes)
        steps = math.ceil(math.log2(P)) if P > 1 else 0
        t_red = steps * (3 * alpha) + 2 * beta * 8 * (n0 + 4) * (P > 1)
        t_local = t_divided / P
        total = t_local + t_coarse + t_halo + t_red
        rows.append({"P": P, "local": t_local, "coarse": t_coarse, "halo": t_halo,
                     "reductions": t_red, "total": total,
                     "speedup": (t_divided + t_coarse) / total})
    return rows


def weak_model(one: dict[str, Any], alpha: float, beta: float, ranks: list[int],
               growth: list[dict[str, Any]], per_rank: int = 1) -> list[dict[str, Any]]:
    """``per_rank`` subdomains per rank, ``N = per_rank P``: the coarse problem grows with ``P``.

    Local work per rank is ``per_rank`` times the measured local time per
    subdomain; GDSW has ``n0 = (n0 / N) N`` coarse functions (the measured
    ratio); its redundant sparse solve and factorisation cost ``a n0^e``
    fitted to :func:`coarse_growth`; its right-hand side is an ``Allreduce``
    of ``n0`` values.  The factorisation is set-up (once, on every rank).
    """
    N = one["parts"] ** 2
    per_sub = (one["matvec_seconds"] + one["apply_seconds"] - one["coarse_solve_seconds"]) / N
    ratio = one["coarse_dim"] / N
    a_s, e_s = power_fit(growth, "solve_seconds")
    largest = max(growth, key=lambda g: g["n0"])
    side = math.sqrt(one["num_dofs"] / N) * math.sqrt(per_rank)
    rows = []
    for P in ranks:
        n0 = ratio * P * per_rank
        t_coarse = a_s * n0 ** e_s
        steps = math.ceil(math.log2(P)) if P > 1 else 0
        t_halo = 0 if P == 1 else 3 * (8 * alpha + beta * 8 * (4 * side + 4))
        t_red = steps * 3 * alpha + 2 * beta * 8 * n0 * (P > 1)
        local = per_sub * per_rank
        rows.append({"P": P, "n0": int(n0), "local": local, "coarse": t_coarse,
                     "halo": t_halo, "reductions": t_red,
                     "total": local + t_coarse + t_halo + t_red,
                     # nested dissection in 2D: n0^{3/2}, from the largest measured size
                     "coarse_factorisation": largest["factor_seconds"]
                     * (n0 / largest["n0"]) ** 1.5})
    return rows


def weak_crossover(one: dict[str, Any], growth: list[dict[str, Any]], per_rank: int) -> float:
    """``P`` at which the redundant coarse solve costs as much as a rank's local work."""
    N = one["parts"] ** 2
    per_sub = (one["matvec_seconds"] + one["apply_seconds"] - one["coarse_solve_seconds"]) / N
    a_s, e_s = power_fit(growth, "solve_seconds")
    ratio = one["coarse_dim"] / N
    # a_s (ratio per_rank P)^e_s = per_sub per_rank
    return (per_sub * per_rank / a_s) ** (1 / e_s) / (ratio * per_rank)


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median solve time (its other numbers come along with it)."""
    order = sorted(runs, key=lambda r: r["solve_seconds"])
    return order[len(order) // 2]


_BURN = ("import time, numpy as np; a = np.random.rand(300, 300); t = time.perf_counter()\n"
         "for _ in range(300): a @ a\nprint(time.perf_counter() - t)")


def core_check(env: dict[str, str]) -> float:
    """Speed of two concurrent compute-bound processes relative to one alone (2.0: two free cores).

    A one-thread matrix-product loop, alone and then two copies at once; the
    ratio ``2 t_alone / t_pair`` says how many cores the other jobs of a shared
    machine leave to this benchmark.
    """
    def run(copies: int) -> float:
        procs = [subprocess.Popen([sys.executable, "-c", _BURN], env=env, text=True,
                                  stdout=subprocess.PIPE) for _ in range(copies)]
        return max(float(p.communicate()[0]) for p in procs)

    alone = run(1)
    return 2 * alone / run(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="points per direction")
    parser.add_argument("--parts", type=int, default=32, help="boxes per direction")
    parser.add_argument("--ranks", type=int, default=2, help="P of the parallel runs")
    parser.add_argument("--rounds", type=int, default=2, help="alternating 1/P rounds")
    parser.add_argument("--rtol", type=float, default=1e-8)
    parser.add_argument("--applies", type=int, default=5,
                        help="calls averaged in the per-operation times")
    parser.add_argument("--growth-parts", type=int, nargs="+", default=[8, 16, 32],
                        help="boxes per direction of the coarse-growth measurement")
    parser.add_argument("--json", help="write every number to this file")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--serial", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        from ddops.distributed import guard, world

        with guard(world()):
            result = worker(args.n, args.parts, args.rtol, args.applies, args.serial)
            if result:
                Path(args.out).write_text(json.dumps(result))
        return

    threads = os.environ.setdefault("OMP_NUM_THREADS", "1")
    env = dict(os.environ, OPENBLAS_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    mpiexec = Path(sys.executable).parent / "mpiexec"
    mpiexec = str(mpiexec) if mpiexec.exists() else "mpiexec"
    load = os.getloadavg()
    print(f"2D Poisson n = {args.n} ({args.n ** 2} unknowns), {args.parts}x{args.parts} "
          f"subdomains, GDSW, CG rtol {args.rtol:g}; OMP_NUM_THREADS={threads}, 1 BLAS "
          f"thread per rank; {os.cpu_count()} cores, load average before "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    cores_before = core_check(env)
    print(f"free cores by a two-process check before: {cores_before:.2f} of {os.cpu_count()}",
          flush=True)
    runs: dict[int, list[dict[str, Any]]] = {1: [], args.ranks: []}
    for round_ in range(args.rounds):
        for P in (1, args.ranks):
            out = Path(tempfile.gettempdir()) / f"ddops_distributed_bench_{os.getpid()}_{P}.json"
            command = [mpiexec, "-n", str(P), sys.executable, os.path.abspath(__file__),
                       "--worker", "--out", str(out), "--n", str(args.n), "--parts",
                       str(args.parts), "--rtol", str(args.rtol), "--applies",
                       str(args.applies)] + (["--serial"] if P == 1 and round_ == 0 else [])
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"run with {P} ranks failed:\n{done.stderr[-3000:]}")
            r = json.loads(out.read_text())
            out.unlink()
            runs[P].append(r)
            print(f"  round {round_ + 1}, {P} rank(s): {r['iterations']} iterations, solve "
                  f"{r['solve_seconds']:.2f} s (CPU {r['solve_cpu_seconds']:.2f} s on the busiest "
                  f"rank), set-up {r['setup_seconds']:.2f} s, load {os.getloadavg()[0]:.2f}",
                  flush=True)
    cores_after = core_check(env)
    print(f"free cores by a two-process check after: {cores_after:.2f}", flush=True)
    one, par = _median_run(runs[1]), _median_run(runs[args.ranks])
    serial = next(r for r in runs[1] if "serial_solve_seconds" in r)
    P = args.ranks
    speed_solve = statistics.median(r["solve_seconds"] for r in runs[1]) / statistics.median(
        r["solve_seconds"] for r in runs[P])
    print()
    print(f"| | 1 rank | {P} ranks | ratio |")
    print("|---|---|---|---|")
    keys = [("CG iterations", "iterations", "{:d}"), ("solve (s)", "solve_seconds", "{:.2f}"),
            ("solve, CPU seconds of the busiest rank", "solve_cpu_seconds", "{:.2f}"),
            ("set-up total (s)", "setup_seconds", "{:.2f}"),
            ("  local factorisations (s)", "local_factorisation_seconds", "{:.2f}"),
            ("  coarse basis (s)", "coarse_basis_seconds", "{:.2f}"),
            ("  coarse matrix: contributions + Allgatherv + factorisation (s)",
             "coarse_matrix_seconds", "{:.2f}"),
            ("problem + decomposition, every rank (s)", "problem_seconds", "{:.2f}"),
            ("layout (s)", "layout_seconds", "{:.2f}"),
            ("one M application (ms)", "apply_seconds", "{:.1f}"),
            ("  local solves (ms)", "local_solve_seconds", "{:.1f}"),
            ("  coarse solve, redundant (ms)", "coarse_solve_seconds", "{:.2f}"),
            ("one product with A (ms)", "matvec_seconds", "{:.2f}"),
            ("halo exchange (ms)", "halo_seconds", "{:.3f}"),
            ("Allreduce of n0 values (ms)", "allreduce_coarse_seconds", "{:.3f}"),
            ("Allreduce of 2 values (ms)", "allreduce_scalar_seconds", "{:.4f}")]
    for label, key, fmt in keys:
        scale = 1e3 if "(ms)" in label else 1
        a, b = one[key] * scale, par[key] * scale
        ratio = f"{a / b:.2f}x" if isinstance(a, float) and b else ""
        print(f"| {label} | {fmt.format(a)} | {fmt.format(b)} | {ratio} |")
    best = min(r["solve_seconds"] for r in runs[1]) / min(r["solve_seconds"] for r in runs[P])
    setup_ratio = statistics.median(r["setup_seconds"] for r in runs[1]) / statistics.median(
        r["setup_seconds"] for r in runs[P])
    print(f"\nbest-of-{args.rounds} solve speed-up {P} ranks / 1 rank: {best:.2f}x; median "
          f"set-up speed-up {setup_ratio:.2f}x")
    print(f"median solve speed-up {P} ranks / 1 rank: {speed_solve:.2f}x "
          f"(solves: 1 rank {[round(r['solve_seconds'], 2) for r in runs[1]]}, {P} ranks "
          f"{[round(r['solve_seconds'], 2) for r in runs[P]]})")
    print(f"serial library (TwoLevelSchwarz + scipy cg, 1 process): {serial['serial_iterations']} "
          f"iterations, solve {serial['serial_solve_seconds']:.2f} s, set-up "
          f"{serial['serial_setup_seconds']:.2f} s, one application "
          f"{1e3 * serial['serial_apply_seconds']:.1f} ms")
    print(f"n0 = {one['coarse_dim']} ({one['coarse_solver']} coarse solver), local solver "
          f"{one['local_solver']}, {par['subdomains_per_rank']} subdomains per rank at {P} ranks")
    pa, pm = par["per_apply"], par["per_matvec"]
    its = max(par["iterations"], 1)
    ss = par["solve_stats"]
    print(f"communication at {P} ranks, summed over ranks: one M application {pa['messages']} "
          f"messages, {pa['bytes']} bytes, {pa['reductions']} reduction of "
          f"{pa['reduction_bytes']} bytes per rank; one product with A {pm['messages']} "
          f"messages, {pm['bytes']} bytes; per CG iteration {ss['messages'] / its:.1f} "
          f"messages, {ss['bytes'] / its:.0f} bytes, {ss['reductions'] / its:.2f} reductions")

    width = round(math.sqrt(one["num_dofs"] / one["parts"] ** 2))
    growth = coarse_growth(width, args.growth_parts)
    a_s, e_s = power_fit(growth, "solve_seconds")
    _, e_f = power_fit(growth, "factor_seconds")
    print(f"\nGDSW coarse problem against N at H/h = {width} (one process):")
    print("| N | n0 | nnz(A0) | nnz(L+U) | factorisation (s) | solve (ms) |")
    print("|---|---|---|---|---|---|")
    for g in growth:
        print(f"| {g['N']} | {g['n0']} | {g['nnz_A0']} | {g['nnz_factor']} | "
              f"{g['factor_seconds']:.3f} | {1e3 * g['solve_seconds']:.3f} |")
    print(f"fit: solve ~ n0^{e_s:.2f}, factorisation ~ n0^{e_f:.2f}")
    pp = par.get("pingpong", {})
    measured = (pp.get("alpha", CLUSTER_ALPHA), pp.get("beta", CLUSTER_BETA))
    ranks = [1, 2, 4, 16, 64, 256, 1000]
    report: dict[str, Any] = {"runs": runs, "speedup_solve": speed_solve,
                              "free_cores_before": cores_before, "free_cores_after": cores_after,
                              "speedup_solve_best": best, "speedup_setup": setup_ratio,
                              "omp_num_threads": threads, "load_before": load,
                              "coarse_growth": growth, "fit_solve_exponent": e_s,
                              "fit_factor_exponent": e_f}
    for name, (alpha, beta) in (("measured here", measured),
                                ("cluster", (CLUSTER_ALPHA, CLUSTER_BETA))):
        print(f"\nmodel, {name}: alpha = {alpha * 1e6:.2f} us, 1/beta = "
              f"{1 / beta / 1e9:.1f} GB/s; strong scaling of this problem (ms per CG "
              "iteration)")
        print("| P | local | coarse | halo | reductions | total | speed-up |")
        print("|---|---|---|---|---|---|---|")
        strong = model(one, par, alpha, beta, ranks, growth)
        for m in strong:
            print(f"| {m['P']} | {1e3 * m['local']:.3f} | {1e3 * m['coarse']:.3f} | "
                  f"{1e3 * m['halo']:.4f} | {1e3 * m['reductions']:.4f} | "
                  f"{1e3 * m['total']:.3f} | {m['speedup']:.1f} |")
        divided = strong[0]["local"]
        print(f"the coarse solve costs as much as the divided local work at P = "
              f"{divided / strong[0]['coarse']:.0f}")
        weak_all = {}
        for per_rank in (1, 16):
            width = math.sqrt(per_rank * one["num_dofs"] / one["parts"] ** 2)
            print(f"weak scaling, {per_rank} subdomain(s) per rank ({width:.0f}^2 unknowns per "
                  "rank; ms per CG iteration; coarse factorisation, set-up, in s)")
            print("| P | n0 | local | coarse solve | halo | reductions | total | "
                  "coarse factorisation (s) |")
            print("|---|---|---|---|---|---|---|---|")
            weak = weak_model(one, alpha, beta, ranks[2:], growth, per_rank)
            for m in weak:
                print(f"| {m['P']} | {m['n0']} | {1e3 * m['local']:.3f} | "
                      f"{1e3 * m['coarse']:.3f} | {1e3 * m['halo']:.4f} | "
                      f"{1e3 * m['reductions']:.4f} | {1e3 * m['total']:.3f} | "
                      f"{m['coarse_factorisation']:.3f} |")
            cross = weak_crossover(one, growth, per_rank)
            print(f"the coarse solve costs as much as a rank's local work at P = {cross:.0f}")
            weak_all[per_rank] = weak
        report[f"model_{name.split()[0]}"] = {"alpha": alpha, "beta": beta, "strong": strong,
                                              "weak": weak_all}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
