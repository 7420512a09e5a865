"""The floor of one training step: bytes it must move, flops it must do, machine rates.

Run from the repository root::

    python benchmarks/floor.py [--sizes 256 8192] [--dtypes float64] [--profile]

It measures the machine (memory bandwidth by a numpy copy, GEMM rate by a
square matrix product, with the BLAS threads of this process), prints for
every size the bytes and flops of one training step of
``SchwarzOperator`` (element kind, ``N = n / 32``, ``r = 4``, ``r0 = N - 1``,
``B = 256``) and the resulting lower bound ``max(bytes / bandwidth,
flops / GEMM rate)``; ``--profile`` adds a cProfile of training steps at
``n = 8192``.  ``benchmarks/run.py`` imports the same functions and puts the
measured step times next to the bound.

Two byte counts are given:

``minimal``
    what any implementation has to move: write ``F`` and ``U`` (data
    generation, plus one read of the two ``n x 32`` bases), read ``F`` for the
    forward, write the prediction, read it and ``U`` in the loss, write the
    gradient, read it in the backward, read ``F`` again for ``dK`` (9 passes
    over an ``n x B`` block), and 10 passes over the parameter vector
    (forward and backward read it, the backward writes the gradient, AdamW
    reads ``p, g, m, v`` and writes ``p, m, v``).
``implemented``
    the passes ddops makes as written (``ddops/operators.py``,
    ``ddops/operators/losses.py``): the gathered blocks ``X``, ``Y`` and ``G_l``
    (``N p`` rows) are materialised (the coarse space rides along in their
    batched GEMMs), and the loss makes five passes (``P - U``, two column
    norms; the column scale goes onto the ``r x B`` intermediates).

Every pass is counted once at the size of the array; a copy counts its read
and its write (the cache line read of write-allocate is not counted, on
either side).
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import io
import os
import pstats
import sys
import time
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import add_quick_flag, machine_info  # noqa: E402

SIZES = (256, 1024, 8192, 32768, 131072)
BATCH = 256
LOCAL_RANK = 4
MODES = 16  # sine and cosine modes of FourierRHS: 2 * MODES basis columns
ELEMENTS_PER_SUBDOMAIN = 32


# -- the machine ---------------------------------------------------------------------------
def blas_threads() -> dict[str, Any]:
    """Threads of the BLAS libraries loaded in this process.

    Uses threadpoolctl when installed; otherwise asks every loaded OpenBLAS
    for its thread count through ctypes, and reports the usual environment
    variables.
    """
    out: dict[str, Any] = {"env": {k: os.environ.get(k) for k in
                                   ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                    "MKL_NUM_THREADS") if os.environ.get(k) is not None}}
    try:
        from threadpoolctl import threadpool_info
        out["libraries"] = [{"library": i.get("internal_api"), "path": i.get("filepath"),
                             "threads": i.get("num_threads")} for i in threadpool_info()]
        out["source"] = "threadpoolctl"
        return out
    except ImportError:
        pass
    libs = []
    for path in _openblas_paths():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
                     "openblas_get_num_threads64_", "openblas_get_num_threads"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = ctypes.c_int
                libs.append({"library": "openblas", "path": os.path.basename(path),
                             "threads": int(fn())})
                break
    out["libraries"] = libs
    out["source"] = "ctypes"
    return out


def set_blas_threads(threads: int) -> bool:
    """Set the thread count of every loaded OpenBLAS (threadpoolctl or ctypes); True if done."""
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(threads, user_api="blas")
        return True
    except ImportError:
        pass
    done = False
    for path in _openblas_paths():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
                     "openblas_set_num_threads64_", "openblas_set_num_threads"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int]
                fn(int(threads))
                done = True
                break
    return done


def _openblas_paths() -> list[str]:
    try:
        with open("/proc/self/maps") as fh:
            return sorted({parts[-1] for parts in (line.split() for line in fh)
                           if len(parts) >= 6 and "openblas" in parts[-1].lower()})
    except OSError:
        return []


def measure_bandwidth(nbytes: int = 2**28, repeats: int = 7) -> float:
    """Bytes per second of ``np.copyto`` between two ``nbytes`` arrays (read + write counted).

    The destination is touched first, so page faults are not part of it;
    the best of ``repeats`` copies is returned.
    """
    n = max(nbytes // 8, 1)
    a = np.ones(n)
    b = np.zeros(n)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2.0 * a.nbytes / best


def measure_first_touch(nbytes: int = 2**27) -> float:
    """Bytes per second of writing a freshly allocated array (page faults included)."""
    n = nbytes // 8
    t = time.perf_counter()
    a = np.empty(n)
    a.fill(1.0)
    elapsed = time.perf_counter() - t
    del a
    return nbytes / elapsed


def measure_gemm(dtype: Any = np.float64, size: int = 2000, repeats: int = 5) -> float:
    """Flops per second of a square ``size x size`` matrix product (best of ``repeats``)."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((size, size)).astype(dtype)
    B = rng.standard_normal((size, size)).astype(dtype)
    C = np.empty_like(A)
    np.matmul(A, B, out=C)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        np.matmul(A, B, out=C)
        best = min(best, time.perf_counter() - t)
    return 2.0 * size**3 / best


def measure_machine(sizes: tuple[int, ...] = (), dtypes: tuple[str, ...] = ("float64",),
                    quick: bool = False, threads: tuple[int, ...] = ()) -> dict[str, Any]:
    """Bandwidth (large copy and copies at the size of one batch block) and GEMM rates.

    With ``threads``, the GEMM rate is the best over those BLAS thread counts.
    """
    rep = 3 if quick else 7
    out: dict[str, Any] = {"bandwidth": measure_bandwidth(2**26 if quick else 2**28, rep),
                           "first_touch": measure_first_touch(2**26 if quick else 2**27),
                           "gemm": {}, "bandwidth_at": {}}
    for name in dtypes:
        out["gemm"][name] = measure_gemm(np.dtype(name), 1000 if quick else 2000, rep)
    if threads:  # the best GEMM rate over the thread counts the benchmark uses
        out["gemm_by_threads"] = {}
        for t in threads:
            if set_blas_threads(t):
                out["gemm_by_threads"][t] = {
                    name: measure_gemm(np.dtype(name), 1000 if quick else 2000, rep)
                    for name in dtypes}
        for by in out["gemm_by_threads"].values():
            for name, rate in by.items():
                out["gemm"][name] = max(out["gemm"][name], rate)
    for n in sizes:
        for name in dtypes:
            block = (n - 1) * BATCH * np.dtype(name).itemsize
            key = f"{n}/{name}"
            if block >= 2**27:
                out["bandwidth_at"][key] = out["bandwidth"]
            else:
                out["bandwidth_at"][key] = measure_bandwidth(block, rep)
    return out


# -- the model of one step -----------------------------------------------------------------
def build(n: int, dtype: Any = np.float64, seed: int = 0):
    """Decomposition, operator and sampler of the benchmark configuration."""
    import ddops
    from ddops.learning.data import FourierRHS

    N = max(n // ELEMENTS_PER_SUBDOMAIN, 1)
    d = ddops.Decomposition1D(n, N, overlap=2, kind="element")
    op = ddops.SchwarzOperator(d, local_rank=LOCAL_RANK, seed=seed, dtype=dtype)
    rhs = FourierRHS(n, kind="element", dtype=dtype)
    return d, op, rhs


def step_model(op: Any, B: int = BATCH, modes: int = MODES) -> dict[str, Any]:
    """Bytes and flops of one training step of ``op`` (see the module docstring)."""
    d = op.decomposition
    s = op.dtype.itemsize
    m = op.shape[0]
    N, p, r = d.num_subdomains, d.max_size, op.local_rank
    n0, r0 = op.coarse_dim, op.coarse_rank
    sum_ni = int(d.indices.size)
    phi = op.coarse_matrix
    coarse_nnz = 0 if phi is None or r0 == 0 else int(phi.nnz)
    overlap_nnz = sum_ni - m       # repeated occurrences: the entries of the overlap CSR
    nnz = sum_ni + coarse_nnz
    rows = N * p + (n0 if r0 > 0 else 0)
    theta = int(op.theta.size)
    k = 2 * modes
    block = m * B * s             # one (m, B) array
    local = N * p * B * s         # one gathered (N p, B) array
    ovl = overlap_nnz * B * s     # the overlap rows of one block
    params = 10 * theta * s
    bases = 2 * m * k * s
    minimal = 9 * block + bases + params
    implemented = (2 * block + bases            # data: write F and U
                   + block + local               # gather: read F, write X
                   + local + local               # Z = [W K, Phi_i]^T X reads X; Y written
                   + local + block + 2 * ovl     # scatter: gather Y into P, add the overlap
                   + 5 * block                   # loss: P - U (3), two column norms (2)
                   + block + local               # gather the gradient G into G_l
                   + 3 * local                   # dQ, H read G_l; dK reads X
                   + params)
    c = op.width - r                            # coarse columns of the extended factors
    collect_nnz = 0 if r0 == 0 else int(op.coarse_collect.nnz)
    flops = {
        "data": 2 * (2 * m * k * B),
        # forward: 2 GEMMs of width r + c; backward: dQ, dK (width r) and H (width r + c)
        "local": (3 * (r + c) + 2 * r) * (2 * sum_ni * B),
        "coarse": 5 * (2 * n0 * r0 * B),
        "spmm": (2 * collect_nnz + overlap_nnz) * 2 * B,  # collect Phi^T F, Phi^T G; overlap
        "loss": 6 * m * B,
        "adamw": 15 * theta,
    }
    return {"n": m + 1, "num_dofs": m, "N": N, "p": p, "r": r, "n0": n0, "r0": r0,
            "sum_ni": sum_ni, "nnz": nnz, "rows": rows, "theta": theta,
            "num_params": int(op.num_params), "itemsize": s, "B": B,
            "bytes_minimal": int(minimal), "bytes_implemented": int(implemented),
            "batch_block_bytes": int(block), "param_bytes": int(theta * s),
            "flops": {k2: int(v) for k2, v in flops.items()},
            "flops_total": int(sum(flops.values())),
            "padding_factor": N * p / sum_ni}


def floor_time(model: dict[str, Any], bandwidth: float, gemm_rate: float,
               which: str = "bytes_minimal") -> dict[str, float]:
    """``max(bytes / bandwidth, flops / gemm_rate)`` and its two parts, in seconds."""
    t_mem = model[which] / bandwidth
    t_flop = model["flops_total"] / gemm_rate
    return {"memory": t_mem, "compute": t_flop, "floor": max(t_mem, t_flop)}


# -- two known costs, measured ------------------------------------------------------------------
def spmm_vs_gather(n: int = 8192, dtype: Any = np.float64, B: int = BATCH,
                   repeats: int = 7) -> dict[str, float]:
    """scipy's SpMM against a numpy gather for the restriction ``D^{1/2} R`` (seconds, best).

    The padded stacked restriction has one nonzero per nonempty row, so
    ``S F`` is also ``w * F[idx]``.  ``spmm`` is the CSR product
    (:func:`ddops.backend.spmm`: zero the output, then scipy's serial
    ``csr_matvecs``, an axpy over the ``B`` columns per nonzero); ``gather``
    is what ddops runs, :func:`ddops.backend.take_rows` with
    :meth:`~ddops.dd.decomposition.Decomposition.padded_gather` (the weights
    ``w`` multiply the factors instead); ``fresh`` is ``S @ F``
    into a newly allocated array (page faults included).
    """
    from ddops.backend import spmm, take_rows

    d, _, rhs = build(n, dtype)
    S = d.stacked_restriction("sqrt", padded=True, dtype=dtype)
    F, _ = rhs.sample(B, np.random.default_rng(0))
    X = np.empty((S.shape[0], B), dtype=dtype)
    Xg = np.empty_like(X)
    idx = d.padded_gather()
    w = d.padded_weights("sqrt")[:, None]

    def best(fn) -> float:
        fn()
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    def gather() -> None:
        take_rows(F, idx, Xg)

    out = {"spmm": best(lambda: spmm(S, F, X)), "zero": best(lambda: X.fill(0)),
           "gather": best(gather), "fresh": best(lambda: S @ F)}
    spmm(S, F, X)
    assert np.allclose(X, w * Xg)
    out["bytes"] = float(2 * X.nbytes)  # read the selected rows of F, write X
    return out


# -- profile ---------------------------------------------------------------------------------
def profile_step(n: int = 8192, dtype: Any = np.float64, steps: int = 10, top: int = 15) -> str:
    """cProfile of ``steps`` training steps (after 3 warm-up steps), sorted by own time."""
    from ddops.learning.training import Trainer, TrainingConfig

    _, op, rhs = build(n, dtype)
    trainer = Trainer(op, rhs, TrainingConfig(steps=10**9, progress=False, val_every=10**9))
    trainer.run(3)
    prof = cProfile.Profile()
    prof.enable()
    trainer.run(3 + steps)
    prof.disable()
    stream = io.StringIO()
    stats = pstats.Stats(prof, stream=stream)
    stats.sort_stats("tottime").print_stats(top)
    text = stream.getvalue()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    return text.replace(root, "")


def _fmt_bytes(x: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if x >= scale:
            return f"{x / scale:.1f} {unit}"
    return f"{x:.0f} B"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--dtypes", nargs="+", default=["float64", "float32"],
                        choices=["float64", "float32"])
    add_quick_flag(parser, "shorter machine measurements")
    parser.add_argument("--profile", action="store_true",
                        help="also cProfile 10 training steps at n=8192 float64")
    args = parser.parse_args(argv)
    info = machine_info()
    print(f"{info.get('cpu')}, {info['cpus']} CPUs, {info.get('memory_gib')} GiB; "
          f"numpy {info['numpy']} ({info['numpy_blas']}), scipy {info['scipy']}")
    print(f"BLAS threads: {blas_threads()}")
    mach = measure_machine(tuple(args.sizes), tuple(args.dtypes), args.quick)
    print(f"copy bandwidth {mach['bandwidth'] / 1e9:.1f} GB/s (256 MB arrays), first touch "
          f"{mach['first_touch'] / 1e9:.2f} GB/s; GEMM " + ", ".join(
              f"{k} {v / 1e9:.1f} GFlop/s" for k, v in mach["gemm"].items()))
    print(f"{'n':>7} {'dtype':>7} {'min bytes':>10} {'impl bytes':>10} {'GFlop':>7} "
          f"{'coarse%':>7} {'t_mem':>9} {'t_flop':>9} {'floor':>9}")
    for name in args.dtypes:
        for n in args.sizes:
            _, op, _ = build(n, np.dtype(name))
            model = step_model(op)
            bw = mach["bandwidth_at"][f"{n}/{name}"]
            ft = floor_time(model, bw, mach["gemm"][name])
            print(f"{n:>7} {name:>7} {_fmt_bytes(model['bytes_minimal']):>10} "
                  f"{_fmt_bytes(model['bytes_implemented']):>10} "
                  f"{model['flops_total'] / 1e9:>7.3f} "
                  f"{100 * model['flops']['coarse'] / model['flops_total']:>6.1f}% "
                  f"{ft['memory'] * 1e3:>7.2f}ms {ft['compute'] * 1e3:>7.2f}ms "
                  f"{ft['floor'] * 1e3:>7.2f}ms")
    if args.profile:
        print(profile_step())
    return 0


if __name__ == "__main__":
    sys.exit(main())
