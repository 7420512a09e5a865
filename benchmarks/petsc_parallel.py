"""ddops inside PETSc on several ranks against ``ddops.distributed`` and PETSc's preconditioners.

Every row is one ``mpiexec -n P`` job of this script (``--worker``); every
rank assembles only its own rows (the 3D elasticity matrix is assembled
whole by scikit-fem on every rank and then cut, before the measurement
starts), and runs CG to ``||b - A x|| <= 1e-8 ||b||`` from a zero guess
(PETSc with ``-ksp_norm_type unpreconditioned``, so that every row stops on
the same test) on a random right-hand side.  The rows:

* ``ddops serial``: :class:`ddops.TwoLevelSchwarz` with scipy's CG in one
  process, METIS on the whole matrix (:meth:`ddops.Decomposition.from_matrix`);
  its peak memory is the reference of the memory target;
* ``ddops.distributed``: :class:`ddops.distributed.DistributedTwoLevelSchwarz`
  with ``ddops.distributed``'s CG, on exactly the parts the PETSc rows use
  (:func:`ddops.petsc.decomposition.rank_decomposition_from_rows`);
* ``SchwarzPC``: PETSc KSPCG with ``-pc_type python -pc_python_type
  ddops.petsc.SchwarzPC``;
* ``native``: :func:`ddops.petsc.setup_native`, PCMG with PCASM on the ddops
  subdomains and Phi, coarse problem by PETSc's default (redundant LU);
  ``native, telescope``: the same with the coarse problem telescoped to one
  rank (``-mg_coarse_pc_type telescope``);
* ``PCASM one-level``: PCASM on the same subdomains, no coarse space;
* ``GAMG`` and ``BoomerAMG``: ``-pc_type gamg`` and ``-pc_type hypre``
  with PETSc's defaults (the rigid body modes as near-null space for
  elasticity, as for every ddops row).

All ddops rows use the same GDSW coarse space (the rigid body modes as its
null space for elasticity), overlap 1 and ddops' default number of
subdomains.  Set-up and solve are the slowest rank's wall times; memory is
each rank's peak resident set (``VmHWM``, reset when the set-up starts, so it
is the process with its matrix rows plus everything the set-up and the
solve add), the largest over the ranks.  ``ddops.distributed`` and
``SchwarzPC`` alternate for ``--rounds`` rounds; the report gives medians,
the ratio of their times and the memory ratio, then PASS/MISS for the
issue's two targets.  Run with a Python that has petsc4py (see the PETSc
page of the documentation)::

    OMP_NUM_THREADS=1 python benchmarks/petsc_parallel.py --ranks 2

``--problems`` picks among ``poisson2d`` (``--n2d``\\ :sup:`2` unknowns,
default 10^6), ``poisson3d`` (``--n3d``\\ :sup:`3`, default 10^6) and
``elasticity3d`` (P1, ``--nel`` interior points per direction); ``--json
FILE`` writes every number.  ``DDOPS_PETSC_MPIEXEC`` names the launcher of
PETSc's MPI when the first ``mpiexec`` on ``PATH`` is another one.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
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

from benchmarks.distributed import (  # noqa: E402
    CLUSTER_ALPHA,
    CLUSTER_BETA,
    gdsw_coarse_problem,
    power_fit,
)

RTOL = 1e-8
#: Iteration cap of every row (the one-level rows may need it).
MAXIT = 3000

#: The rows, in the order of the table: (label, ranks "P" or "1").
METHODS = {
    "serial": "ddops serial (scipy CG)",
    "distributed": "ddops.distributed CG",
    "schwarzpc": "PETSc CG + SchwarzPC",
    "native": "PETSc CG + native (PCMG)",
    "native-telescope": "native, coarse telescoped",
    "asm": "PCASM one-level",
    "gamg": "GAMG",
    "boomeramg": "BoomerAMG",
}

#: PETSc options of the PETSc-only rows.
PETSC_ROWS = {
    "gamg": {"pc_type": "gamg"},
    "boomeramg": {"pc_type": "hypre", "pc_hypre_type": "boomeramg"},
}


# -- problems: every rank its own rows -----------------------------------------------------
def stencil_rows(shape: tuple[int, ...], rstart: int, rend: int):
    """Rows ``[rstart, rend)`` of the (2d+1)-point Laplacian on ``shape`` (first axis fastest)."""
    import scipy.sparse as sp

    rows = np.arange(rstart, rend, dtype=np.int64)
    dim = len(shape)
    coords, stride, rest = [], 1, rows.copy()
    strides = []
    for size in shape:
        coords.append(rest % size)
        rest //= size
        strides.append(stride)
        stride *= size
    r, c, v = [rows], [rows], [np.full(rows.size, 2.0 * dim)]
    for axis in range(dim):
        for sign, ok in ((-1, coords[axis] > 0), (1, coords[axis] < shape[axis] - 1)):
            r.append(rows[ok])
            c.append(rows[ok] + sign * strides[axis])
            v.append(np.full(int(ok.sum()), -1.0))
    n = int(np.prod(shape))
    A = sp.csr_matrix((np.concatenate(v), (np.concatenate(r) - rstart, np.concatenate(c))),
                      shape=(rend - rstart, n))
    A.sort_indices()
    return A


def row_ranges(n: int, size: int, block: int) -> np.ndarray:
    """Contiguous row ranges in whole nodes, as PETSc's default split of the nodes."""
    from ddops.dd.decomposition import split_sizes

    return np.concatenate([[0], np.cumsum(split_sizes(n // block, size) * block)])


def problem(name: str, args, rank: int, size: int) -> dict[str, Any]:
    """This rank's rows, the row ranges, the block size and the null space rows (or None)."""
    if name in ("poisson2d", "poisson3d"):
        shape = (args.n2d,) * 2 if name == "poisson2d" else (args.n3d,) * 3
        n = int(np.prod(shape))
        ranges = row_ranges(n, size, 1)
        rstart, rend = int(ranges[rank]), int(ranges[rank + 1])
        return {"n": n, "block": 1, "ranges": ranges, "rows": stencil_rows(shape, rstart, rend),
                "null_space": None}
    if name == "elasticity3d":
        import gc

        import ddops
        from ddops.problems import fem_elasticity_3d

        A, coordinates = fem_elasticity_3d(args.nel)
        n = A.shape[0]
        ranges = row_ranges(n, size, 3)
        rstart, rend = int(ranges[rank]), int(ranges[rank + 1])
        rows = A.tocsr()[rstart:rend].copy()
        Z = ddops.rigid_body_modes(coordinates)
        del A, coordinates
        gc.collect()
        return {"n": n, "block": 3, "ranges": ranges, "rows": rows, "null_space": Z}
    raise ValueError(f"--problems: unknown problem {name!r}")


# -- memory --------------------------------------------------------------------------------
def _status(key: str) -> float:
    """A ``/proc/self/status`` entry in MB (0 where there is no such file)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def reset_peak() -> float:
    """Release the heap's free memory, reset ``VmHWM`` to the resident set; that set in MB.

    The problem's assembly leaves freed memory in the C heap of the process;
    ``malloc_trim`` (glibc) returns it, so that every row starts from what it
    really holds: the interpreter, its libraries and the matrix rows.
    """
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    start = _status("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return start


# -- the worker ----------------------------------------------------------------------------
def worker(method: str, name: str, args) -> dict[str, Any]:
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    if method == "serial":
        return _serial(name, args)
    import petsc4py

    petsc4py.init([sys.argv[0]])
    from mpi4py import MPI
    from petsc4py import PETSc

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    data = problem(name, args, rank, size)
    n, ranges, rows = data["n"], data["ranges"], data["rows"]
    rstart, rend = int(ranges[rank]), int(ranges[rank + 1])
    b = np.random.default_rng(0).standard_normal(n)[rstart:rend]
    Z = data["null_space"]
    record: dict[str, Any] = {"method": method, "problem": name, "ranks": size, "n": n}

    def slowest(x: float) -> float:
        return float(comm.allreduce(x, op=MPI.MAX))

    if method == "distributed":
        from ddops.distributed import DistributedLayout, DistributedMatrix
        from ddops.distributed.krylov import cg
        from ddops.distributed.precond import DistributedTwoLevelSchwarz
        from ddops.petsc.decomposition import rank_decomposition_from_rows

        comm.Barrier()
        record["start_mb"] = float(comm.allreduce(reset_peak(), op=MPI.MAX))
        start = time.perf_counter()
        parts = rank_decomposition_from_rows(rows, (rstart, rend), comm if size > 1 else None,
                                             block_size=data["block"])
        layout = DistributedLayout(parts.decomposition, comm, A=rows,
                                   subdomain_ranks=parts.subdomain_ranks)
        M = DistributedTwoLevelSchwarz(layout, None, "gdsw", "additive", null_space=Z)
        Ad = DistributedMatrix(layout, rows)
        record["setup_seconds"] = slowest(time.perf_counter() - start)
        its = [0]
        comm.Barrier()
        start = time.perf_counter()
        x, info = cg(Ad, b, rtol=RTOL, M=M, maxiter=MAXIT,
                     callback=lambda _: its.__setitem__(0, its[0] + 1))
        record["solve_seconds"] = slowest(time.perf_counter() - start)
        r = b - Ad.matvec(x)
        record.update(iterations=its[0], converged=info == 0, coarse_dim=int(M.coarse_dim),
                      subdomains=int(parts.decomposition.num_subdomains),
                      relative_residual=float(np.sqrt(comm.allreduce(r @ r)
                                                      / comm.allreduce(b @ b))))
    else:
        P = PETSc.Mat().createAIJ(((rend - rstart, n), (rend - rstart, n)),
                                  bsize=data["block"], comm=PETSc.COMM_WORLD)
        P.setPreallocationCSR((rows.indptr.astype(PETSc.IntType),
                               rows.indices.astype(PETSc.IntType), rows.data))
        P.assemble()
        if Z is not None:
            vectors = []
            for k in range(Z.shape[1]):
                v = P.createVecLeft()
                v.setArray(Z[rstart:rend, k])
                vectors.append(v)
            P.setNearNullSpace(PETSc.NullSpace().create(constant=False, vectors=vectors))
            del Z
        del rows, data
        import gc

        gc.collect()
        ksp = PETSc.KSP().create(comm=PETSc.COMM_WORLD)
        ksp.setOperators(P)
        ksp.setType(PETSc.KSP.Type.CG)
        ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
        ksp.setTolerances(rtol=RTOL, atol=0.0, max_it=MAXIT)
        db = PETSc.Options()
        pc = ksp.getPC()
        comm.Barrier()
        record["start_mb"] = float(comm.allreduce(reset_peak(), op=MPI.MAX))
        start = time.perf_counter()
        native = None
        if method == "schwarzpc":
            from ddops.petsc import SchwarzPC

            pc.setType(PETSc.PC.Type.PYTHON)
            pc.setPythonContext(SchwarzPC(coarse="gdsw"))
        elif method in ("native", "native-telescope", "asm"):
            from ddops.petsc import setup_native

            if method == "native-telescope" and size > 1:
                db.setValue("mg_coarse_pc_type", "telescope")
                db.setValue("mg_coarse_pc_telescope_reduction_factor", size)
                db.setValue("mg_coarse_telescope_pc_type", "lu")
            native = setup_native(ksp, coarse="none" if method == "asm" else "gdsw")
        else:
            for key, value in PETSC_ROWS[method].items():
                db.setValue(key, value)
        ksp.setFromOptions()
        ksp.setUp()
        record["setup_seconds"] = slowest(time.perf_counter() - start)
        bv = P.createVecLeft()
        bv.setArray(b)
        xv = bv.duplicate()
        comm.Barrier()
        start = time.perf_counter()
        ksp.solve(bv, xv)
        record["solve_seconds"] = slowest(time.perf_counter() - start)
        rv = bv.duplicate()
        P.mult(xv, rv)
        rv.aypx(-1.0, bv)
        record.update(iterations=int(ksp.getIterationNumber()),
                      converged=int(ksp.getConvergedReason()) > 0,
                      relative_residual=float(rv.norm() / bv.norm()))
        if method == "schwarzpc":
            ctx = pc.getPythonContext()
            record["coarse_dim"] = int(ctx.preconditioner.coarse_dim)
            record["subdomains"] = int(ctx.parts.decomposition.num_subdomains)
        elif native is not None:
            record["coarse_dim"] = int(native.coarse_dim)
            record["subdomains"] = int(native.parts.decomposition.num_subdomains)
        # PETSc's objects before the interpreter exits (petsc4py 3.18 may crash at exit
        # otherwise); the KSP first, as it holds the python PC
        for obj in (ksp, bv, xv, rv, P):
            obj.destroy()
        if native is not None:
            native.destroy()
    record["peak_mb"] = float(comm.allreduce(_status("VmHWM"), op=MPI.MAX))
    record["peak_mb_per_rank"] = comm.allgather(_status("VmHWM"))
    return record if rank == 0 else {}


def _serial(name: str, args) -> dict[str, Any]:
    """The serial library in one process: the reference of the memory target."""
    import scipy.sparse.linalg as spla

    import ddops
    from ddops.dd.partition import default_subdomains

    data = problem(name, args, 0, 1)
    A, n = data["rows"], data["n"]
    b = np.random.default_rng(0).standard_normal(n)
    start_mb = reset_peak()
    start = time.perf_counter()
    d = ddops.Decomposition.from_matrix(A, default_subdomains(n, data["block"]),
                                        1, block_size=data["block"])
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant="additive",
                              null_space=data["null_space"])
    record: dict[str, Any] = {"method": "serial", "problem": name, "ranks": 1, "n": n,
                              "setup_seconds": time.perf_counter() - start,
                              "start_mb": start_mb}
    its = [0]
    start = time.perf_counter()
    x, info = spla.cg(A, b, rtol=RTOL, maxiter=MAXIT, M=M,
                      callback=lambda _: its.__setitem__(0, its[0] + 1))
    record["solve_seconds"] = time.perf_counter() - start
    record.update(iterations=its[0], converged=info == 0, coarse_dim=int(M.coarse_dim),
                  subdomains=int(d.num_subdomains),
                  relative_residual=float(np.linalg.norm(b - A @ x) / np.linalg.norm(b)),
                  peak_mb=_status("VmHWM"))
    return record


# -- the coarse-solve model ------------------------------------------------------------------
def coarse_costs(width: int, parts_list: list[int], repeats: int = 20) -> list[dict[str, Any]]:
    """PETSc's costs of the GDSW coarse problem against ``N`` at fixed ``H/h`` (one process).

    ``parts x parts`` boxes of ``width x width`` points of 2D Poisson: ``A_0 =
    Phi^T A Phi``, then with PETSc on one process the LU factorisation and one
    solve (the coarse solve of the redundant and telescoped routes), GAMG's
    set-up and one V-cycle (``-mg_coarse_pc_type gamg``, inexact), and the
    one-level work per subdomain that a rank does per CG iteration (one
    product with ``A`` and one application of ddops' one-level additive
    Schwarz, ``TwoLevelSchwarz`` without coarse space).
    """
    import petsc4py

    petsc4py.init([sys.argv[0]])
    from petsc4py import PETSc

    import ddops

    rows = []
    for parts in parts_list:
        A, d, A0 = gdsw_coarse_problem(width, parts)
        P0 = PETSc.Mat().createAIJ(A0.shape, csr=(A0.indptr.astype(PETSc.IntType),
                                                  A0.indices.astype(PETSc.IntType), A0.data),
                                   comm=PETSc.COMM_SELF)
        row: dict[str, Any] = {"N": parts * parts, "n0": int(A0.shape[0]), "nnz_A0": int(A0.nnz)}
        for kind in ("lu", "gamg"):
            pc = PETSc.PC().create(comm=PETSc.COMM_SELF)
            pc.setOperators(P0)
            pc.setType(kind)
            if kind == "lu":
                pc.setFactorOrdering("nd")
            start = time.perf_counter()
            pc.setUp()
            row[f"{kind}_setup_seconds"] = time.perf_counter() - start
            x, y = P0.createVecs()
            x.set(1.0)
            start = time.perf_counter()
            for _ in range(repeats):
                pc.apply(x, y)
            row[f"{kind}_apply_seconds"] = (time.perf_counter() - start) / repeats
            for obj in (pc, x, y):
                obj.destroy()
        M = ddops.TwoLevelSchwarz(A, d, coarse_basis=None, coarse=False, variant="additive")
        b = np.ones(A.shape[0])
        start = time.perf_counter()
        for _ in range(max(repeats // 4, 2)):
            M.matvec(A @ b)
        row["local_seconds_per_subdomain"] = ((time.perf_counter() - start)
                                              / max(repeats // 4, 2) / (parts * parts))
        rows.append(row)
        P0.destroy()
    return rows


def coarse_model(costs: list[dict[str, Any]], per_rank: int, ranks: list[int], alpha: float,
                 beta: float) -> list[dict[str, Any]]:
    """Coarse-phase time per CG iteration at ``P`` ranks, weak scaling, three coarse solvers.

    ``per_rank`` subdomains per rank, ``N = per_rank P`` and ``n0 = (n0/N) N``
    (the measured ratio).  Per iteration, in milliseconds:

    * ``local``: the rank's one-level work, ``per_rank`` times the measured
      time per subdomain;
    * ``redundant``: every rank solves with its own LU (``SchwarzPC``,
      ``ddops.distributed``, and PCMG's default): ``t_LU(n0)`` plus an
      ``Allreduce`` of ``n0`` values (``ceil(log2 P)`` latencies, ``2 * 8 n0``
      bytes);
    * ``telescope``: ``-mg_coarse_pc_type telescope`` to one rank, LU there:
      the ``n0`` values are gathered from ``P - 1`` ranks and scattered back
      (``2 (P - 1)`` messages through one rank, ``2 * 8 n0`` bytes), one LU
      solve;
    * ``gamg``: one GAMG V-cycle on the coarse problem spread over all ``P``
      ranks (``-mg_coarse_pc_type gamg``, inexact): the measured one-process
      V-cycle divided by ``P``, plus two halo exchanges (8 neighbours) and one
      reduction per level (levels ``~ log4(n0 / 100)``).

    ``t_LU`` and the V-cycle are ``a n0^e`` fitted to :func:`coarse_costs`.
    """
    ratio = statistics.median(r["n0"] / r["N"] for r in costs)
    per_sub = statistics.median(r["local_seconds_per_subdomain"] for r in costs)
    a_lu, e_lu = power_fit(costs, "lu_apply_seconds")
    a_v, e_v = power_fit(costs, "gamg_apply_seconds")
    a_f, e_f = power_fit(costs, "lu_setup_seconds")
    out = []
    for P in ranks:
        n0 = ratio * per_rank * P
        steps = math.ceil(math.log2(P)) if P > 1 else 0
        lu = a_lu * n0 ** e_lu
        levels = max(1, math.ceil(math.log(max(n0 / 100, 1.0), 4)))
        out.append({
            "P": P, "n0": int(n0), "local": per_sub * per_rank,
            "redundant": lu + steps * alpha + 2 * beta * 8 * n0 * (P > 1),
            "telescope": lu + 2 * (P - 1) * alpha + 2 * beta * 8 * n0 * (P > 1),
            "gamg": a_v * n0 ** e_v / P + levels * (2 * 8 * alpha + steps * alpha) * (P > 1),
            "lu_factorisation": a_f * n0 ** e_f,
        })
    return out


def crossover(rows: list[dict[str, Any]], key: str) -> str:
    """The first ``P`` where the coarse phase ``key`` costs more than the local work."""
    for r in rows:
        if r[key] > r["local"]:
            return str(r["P"])
    return f"> {rows[-1]['P']}"


def print_model(costs: list[dict[str, Any]], alpha: float, beta: float) -> list[str]:
    lines = ["\nPETSc's coarse solvers for the GDSW coarse problem (one process, H/h = "
             f"{costs[0].get('width', '')}):",
             "| N | n0 | LU set-up (s) | LU solve (ms) | GAMG set-up (s) | GAMG V-cycle (ms) "
             "| local work per subdomain (ms) |", "|---|---|---|---|---|---|---|"]
    for r in costs:
        lines.append(f"| {r['N']} | {r['n0']} | {r['lu_setup_seconds']:.3f} | "
                     f"{r['lu_apply_seconds'] * 1e3:.3f} | {r['gamg_setup_seconds']:.3f} | "
                     f"{r['gamg_apply_seconds'] * 1e3:.3f} | "
                     f"{r['local_seconds_per_subdomain'] * 1e3:.3f} |")
    ranks = [4, 16, 64, 256, 1000, 4000, 16000]
    for per_rank in (1, 16):
        rows = coarse_model(costs, per_rank, ranks, alpha, beta)
        lines += [f"\nweak scaling, {per_rank} subdomain(s) per rank, alpha = "
                  f"{alpha * 1e6:.1f} us, 1/beta = {1 / beta / 1e9:.0f} GB/s "
                  "(ms per CG iteration):",
                  "| P | n0 | local | redundant LU | telescope to 1 rank, LU | GAMG V-cycle "
                  "on all ranks | LU factorisation (s) |", "|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['P']} | {r['n0']} | {r['local'] * 1e3:.3f} | "
                         f"{r['redundant'] * 1e3:.3f} | {r['telescope'] * 1e3:.3f} | "
                         f"{r['gamg'] * 1e3:.3f} | {r['lu_factorisation']:.3f} |")
        lines.append("coarse phase above the local work from P = "
                     + ", ".join(f"{k}: {crossover(rows, k)}"
                                 for k in ("redundant", "telescope", "gamg")))
    return lines


# -- the driver ----------------------------------------------------------------------------
def mpiexec() -> list[str]:
    """PETSc's MPI launcher (``DDOPS_PETSC_MPIEXEC`` or the first ``mpiexec`` on ``PATH``)."""
    found = os.environ.get("DDOPS_PETSC_MPIEXEC") or shutil.which("mpiexec")
    if not found:
        raise SystemExit("petsc_parallel: no mpiexec found (set DDOPS_PETSC_MPIEXEC)")
    command = found.split()
    version = subprocess.run(command + ["--version"], capture_output=True, text=True).stdout
    if "Open MPI" in version or "OpenRTE" in version:
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--allow-run-as-root")
        command.append("--oversubscribe")
    return command


def run(method: str, name: str, ranks: int, args, launcher: list[str]) -> dict[str, Any]:
    """One job; its record (rank 0's)."""
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "record.json"
        command = [sys.executable, os.path.abspath(__file__), "--worker", method,
                   "--problems", name, "--n2d", str(args.n2d), "--n3d", str(args.n3d),
                   "--nel", str(args.nel), "--json", str(out)]
        if method != "serial":
            command = launcher + ["-n", str(ranks)] + command
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              timeout=args.timeout)
        if done.returncode != 0 or not out.exists():
            tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
            return {"method": method, "problem": name, "ranks": ranks,
                    "error": " / ".join(tail) or f"exit {done.returncode}"}
        return json.loads(out.read_text())


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    out = dict(ok[0])
    for key in ("setup_seconds", "solve_seconds", "peak_mb", "start_mb"):
        out[key] = statistics.median(r[key] for r in ok)
    out["rounds"] = len(ok)
    return out


def report(name: str, rows: dict[str, dict[str, Any]]) -> list[str]:
    serial = rows.get("serial", {})
    lines = [f"\n{name}: n = {serial.get('n', next(iter(rows.values())).get('n'))}",
             f"{'row':28s} {'ranks':>5s} {'its':>5s} {'set-up s':>9s} {'solve s':>9s} "
             f"{'total s':>9s} {'peak MB/rank':>12s} {'/serial':>8s} {'start MB':>9s} "
             f"{'added MB':>9s} {'/serial':>8s} {'coarse':>7s}"]
    for method, r in rows.items():
        if "error" in r:
            lines.append(f"{METHODS[method]:28s} {r['ranks']:5d}  failed: {r['error'][:200]}")
            continue
        its = f"{r['iterations']}" + ("" if r["converged"] else "*")
        added = r["peak_mb"] - r["start_mb"]
        rel = (f"{r['peak_mb'] / serial['peak_mb']:8.2f}" if serial.get("peak_mb") else
               f"{'':8s}")
        rel_added = (f"{added / (serial['peak_mb'] - serial['start_mb']):8.2f}"
                     if serial.get("peak_mb") else f"{'':8s}")
        lines.append(f"{METHODS[method]:28s} {r['ranks']:5d} {its:>5s} {r['setup_seconds']:9.2f} "
                     f"{r['solve_seconds']:9.2f} {r['setup_seconds'] + r['solve_seconds']:9.2f} "
                     f"{r['peak_mb']:12.0f} {rel} {r['start_mb']:9.0f} {added:9.0f} {rel_added} "
                     f"{r.get('coarse_dim', ''):>7}")
    lines.append("(* not converged in the iteration cap; medians over the rounds for "
                 "ddops.distributed and SchwarzPC; start MB: resident before the set-up, "
                 "added MB: peak minus start)")
    dist, pc = rows.get("distributed", {}), rows.get("schwarzpc", {})
    if "setup_seconds" in dist and "setup_seconds" in pc:
        ratio = ((pc["setup_seconds"] + pc["solve_seconds"])
                 / (dist["setup_seconds"] + dist["solve_seconds"]))
        same = pc["iterations"] == dist["iterations"]
        verdict = "PASS" if ratio <= 1.1 and same else "MISS"
        lines.append(f"target: SchwarzPC / ddops.distributed time {ratio:.3f} (<= 1.1), "
                     f"iterations {pc['iterations']} and {dist['iterations']} "
                     f"(equal): {verdict}")
    if "peak_mb" in pc and serial.get("peak_mb"):
        ratio = pc["peak_mb"] / serial["peak_mb"]
        lines.append(f"target: SchwarzPC peak per rank / serial peak {ratio:.3f} (<= 0.6): "
                     f"{'PASS' if ratio <= 0.6 else 'MISS'}")
        added = (pc["peak_mb"] - pc["start_mb"]) / (serial["peak_mb"] - serial["start_mb"])
        lines.append(f"  without the process before the set-up (interpreter, libraries, the "
                     f"rows): {added:.3f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--problems", default="poisson2d,poisson3d,elasticity3d")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--n2d", type=int, default=1000)
    parser.add_argument("--n3d", type=int, default=100)
    parser.add_argument("--nel", type=int, default=35)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--model", action="store_true",
                        help="only the coarse-solve model (one process)")
    parser.add_argument("--model-width", type=int, default=31,
                        help="points per subdomain per direction in the model (H/h)")
    parser.add_argument("--model-parts", type=int, nargs="+", default=[8, 16, 32],
                        help="boxes per direction of the model's coarse problems")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.model:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
        costs = coarse_costs(args.model_width, args.model_parts)
        for c in costs:
            c["width"] = args.model_width
        print("\n".join(print_model(costs, CLUSTER_ALPHA, CLUSTER_BETA)))
        if args.json:
            Path(args.json).write_text(json.dumps({"coarse_costs": costs}, indent=1))
        return
    if args.worker:
        record = worker(args.worker, args.problems, args)
        if record:
            Path(args.json).write_text(json.dumps(record))
        return
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"--methods: unknown {unknown}; choose from {list(METHODS)}")
    launcher = mpiexec()
    results: dict[str, Any] = {"ranks": args.ranks, "omp_num_threads":
                               os.environ.get("OMP_NUM_THREADS", "1"), "problems": {}}
    for name in args.problems.split(","):
        rows: dict[str, dict[str, Any]] = {}
        if "serial" in methods:
            rows["serial"] = run("serial", name, 1, args, launcher)
        paired = [m for m in ("distributed", "schwarzpc") if m in methods]
        runs: dict[str, list] = {m: [] for m in paired}
        for _ in range(args.rounds):  # alternate: the machine's load affects both alike
            for m in paired:
                runs[m].append(run(m, name, args.ranks, args, launcher))
        rows.update({m: _median(runs[m]) for m in paired})
        for m in methods:
            if m not in rows:
                rows[m] = run(m, name, args.ranks, args, launcher)
        results["problems"][name] = {"rows": rows, "runs": runs}
        print("\n".join(report(name, rows)), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
