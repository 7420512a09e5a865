"""GenEO's coarse columns: assembled as runs (one slice of Phi^T each) against entry triples,
and their Galerkin product with and without scipy's count of its entries.

On the 3D elasticity problem with 20 stiff balls (contrast 1e6, 64 METIS parts, GenEO with
the finite-element Neumann matrices; ``--mesh-3d 32``: 114,444 unknowns, about 8.5 M
entries in the coarse basis) one GenEO set-up runs (one BLAS/MKL thread; its set-up
seconds, the phase ``coarse_basis_other`` and pyamg SA's set-up with rigid body modes
beside it), and the arguments of its ``columns_from_groups`` call are kept.  Then, in
alternating rounds (best of ``--repeat``), the same columns are assembled twice:

- runs: ``columns_from_groups(..., runs=...)`` as the set-up calls it (each run's column a
  slice of ``Phi^T``'s rows in column order, one transposition);
- triples: the way before it, every entry's row, column and value as a COO triple, converted
  to CSR (a sort of all entries), zeros dropped, indices sorted.

Both must give the same matrix bit for bit.  Then ``A_0 = Phi^T (A Phi)`` (``A Phi`` formed
once, untimed; ``Phi^T`` in CSR), again in alternating rounds:

- spgemm: :func:`ddops.backend.spgemm` on one thread (the set-up calls it through
  :func:`~ddops.dd.coarse_matrix.transposed_product`): scipy's kernel into buffers
  bounded by each row's multiplications and the columns, the count skipped;
- scipy: scipy's ``@`` (a first pass counts the entries, a second multiplies), the way
  before it;
- spgemm on all the machine's cores (its blocks side by side on threads), where it has
  more than one.

Both must give the same matrix bit for bit.  Prints the wall and process CPU seconds of
each and, from one more call of each under ``tracemalloc`` (not timed: tracing slows the
allocations), the peak of its traced memory (numpy's arrays).

    python benchmarks/coarse_columns.py              # 114,444 unknowns (about 1 min)
    python benchmarks/coarse_columns.py --quick      # small
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tracemalloc
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine_summary, timed_sa_setup  # noqa: E402


def triples_columns(rows, group, values, keep, n, runs):
    """The columns of ``columns_from_groups(rows, group, values, keep, n, runs=runs)`` from
    one COO triple per entry (the previous assembly; the reference of this benchmark)."""
    if values.shape[1]:
        raise ValueError("GenEO's call passes every vector as runs")
    num_groups, k = keep.shape
    column = np.full((num_groups, k), -1, dtype=np.int64)
    column[keep] = np.arange(int(keep.sum()))
    run_group, run_vector, start, length, run_values = runs
    run = np.repeat(np.arange(length.size), length)
    entry = np.arange(run.size) - np.repeat(np.cumsum(length) - length - start, length)
    sel = keep[run_group[run], run_vector[run]]
    Phi = sp.csr_matrix((run_values[sel], (rows[entry[sel]],
                                           column[run_group[run[sel]], run_vector[run[sel]]])),
                        shape=(n, int(keep.sum())))
    Phi.eliminate_zeros()
    Phi.sort_indices()
    return Phi


def timed(function, *args, **kwargs):
    """``function(*args, **kwargs)``: its result, wall and process CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = function(*args, **kwargs)
    return out, time.perf_counter() - wall, time.process_time() - cpu


def traced_peak(function, *args, **kwargs) -> int:
    """The peak of the memory ``tracemalloc`` traces during one call (bytes)."""
    tracemalloc.start()
    function(*args, **kwargs)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def identical(P, Q) -> bool:
    """The same CSR arrays bit for bit (pointers, column indices in their order, values)."""
    return (P.shape == Q.shape and np.array_equal(P.indptr, Q.indptr)
            and np.array_equal(P.indices, Q.indices)
            and P.data.dtype == Q.data.dtype and P.data.tobytes() == Q.data.tobytes())


def main(argv=None) -> int:
    from adaptive import elasticity_problem
    from threadpoolctl import threadpool_limits

    import ddops
    from ddops.backend import spgemm
    from ddops.dd import geneo, groups
    from ddops.linalg.parallel import MAX_CHUNK_WORKERS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mesh-3d", type=int, default=32,
                        help="3D mesh size (32: 114,444 unknowns)")
    parser.add_argument("--quick", action="store_true", help="mesh 8, 8 parts")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    mesh, parts = (8, 8) if args.quick else (args.mesh_3d, 64)
    print(machine_summary(memory=True, ddops=True))
    A, d, Z, neumann, _ = elasticity_problem(3, mesh, parts, 1e6, 20, 0.15)
    A = A.tocsr()
    kept = {}
    library = geneo.columns_from_groups

    def keeping(*a, **kw):
        kept["args"] = (a, kw)
        return library(*a, **kw)

    options = ddops.SchwarzOptions(coarse="geneo", null_space=Z,
                                   geneo=ddops.GenEOOptions(neumann=neumann))
    best: dict = {}
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        geneo.columns_from_groups = keeping
        try:
            M, setup, setup_cpu = timed(ddops.TwoLevelSchwarz, A, d, options=options)
        finally:
            geneo.columns_from_groups = library
        other = M.setup_phases["coarse_basis_other"]
        del M
        _, sa, sa_cpu = timed_sa_setup(SimpleNamespace(A=A, null_space=Z))
        (rows, group, values, keep, n), kw = kept["args"]
        runs = tuple(np.asarray(x) for x in kw["runs"])
        ways = {"runs": lambda: groups.columns_from_groups(rows, group, values, keep, n,
                                                           runs=runs)[0],
                "triples": lambda: triples_columns(rows, group, values, keep, n, runs)}
        for _ in range(max(args.repeat, 1)):
            for way, assemble in ways.items():
                out = timed(assemble)
                if way not in best or out[1] < best[way][1]:
                    best[way] = out
        peaks = {way: traced_peak(assemble) for way, assemble in ways.items()}
        Phi = best["runs"][0]
        PhiT, APhi = Phi.T.tocsr(), A @ Phi
        products = {"spgemm": lambda: spgemm(PhiT, APhi), "scipy": lambda: PhiT @ APhi}
        cores = min(os.cpu_count() or 1, MAX_CHUNK_WORKERS)
        if cores > 1:  # the same blocks on every core (the set-up's threads=cores)
            products[f"spgemm, {cores} threads"] = lambda: spgemm(PhiT, APhi, workers=cores)
        for _ in range(max(args.repeat, 1)):
            for way, multiply in products.items():
                out = timed(multiply)
                if way not in best or out[1] < best[way][1]:
                    best[way] = out
        peaks.update({way: traced_peak(multiply) for way, multiply in products.items()})
    same = identical(best["runs"][0], best["triples"][0])
    same_product = all(identical(best[way][0], best["scipy"][0]) for way in products)
    P = best["runs"][0]
    print(f"3D elasticity, 20 stiff balls 1e6, {A.shape[0]:,} unknowns, {parts} parts, "
          f"GenEO with finite-element Neumann matrices, one thread: set-up {setup:.2f} s "
          f"(CPU {setup_cpu:.2f} s; coarse_basis_other {other:.2f} s), pyamg SA set-up "
          f"{sa:.2f} s (CPU {sa_cpu:.2f} s); coarse basis {P.shape[1]:,} columns, "
          f"{P.nnz:,} entries\n")
    print(f"| assembly | best of {args.repeat}: wall s | CPU s | traced peak MiB |")
    print("|---|---:|---:|---:|")
    for way in ways:
        print(f"| {way} | {best[way][1]:.3f} | {best[way][2]:.3f} | {peaks[way] / 2**20:.0f} |")
    print(f"\nruns / triples: {best['runs'][1] / best['triples'][1]:.2f}x the time; the same "
          f"matrix bit for bit: {'yes' if same else 'NO'}\n")
    A0 = best["spgemm"][0]
    print(f"| A_0 = Phi^T (A Phi), {A0.shape[0]:,} x {A0.shape[1]:,}, {A0.nnz:,} entries | best "
          f"of {args.repeat}: wall s | CPU s | traced peak MiB |")
    print("|---|---:|---:|---:|")
    for way in products:
        print(f"| {way} | {best[way][1]:.3f} | {best[way][2]:.3f} | {peaks[way] / 2**20:.0f} |")
    print(f"\nspgemm / scipy: {best['spgemm'][1] / best['scipy'][1]:.2f}x the time; the same "
          f"matrix bit for bit: {'yes' if same_product else 'NO'}")
    if args.json:
        args.json.write_text(json.dumps({
            "unknowns": int(A.shape[0]), "setup": setup, "setup_cpu": setup_cpu,
            "coarse_basis_other": other, "sa": sa, "sa_cpu": sa_cpu,
            "columns": int(P.shape[1]), "entries": int(P.nnz), "same": bool(same),
            "product_entries": int(A0.nnz), "same_product": bool(same_product),
            **{way: {"seconds": best[way][1], "cpu": best[way][2], "peak": peaks[way]}
               for way in [*ways, *products]}},
            indent=1))
    return 0 if same and same_product else 1


if __name__ == "__main__":
    raise SystemExit(main())
