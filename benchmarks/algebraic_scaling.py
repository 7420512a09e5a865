"""Weak scaling, memory and set-up cost of the algebraic two-level Schwarz preconditioners.

Run from the repository root::

    python benchmarks/algebraic_scaling.py                    # every section but --huge
    python benchmarks/algebraic_scaling.py --quick            # smoke run, small sizes (~1 min)
    python benchmarks/algebraic_scaling.py --sections poisson2d memory --json results/alg.json
    python benchmarks/algebraic_scaling.py --sections huge    # 10^7 unknowns (minutes)

CG (scipy) to ``rtol = 1e-8`` from ``x0 = 0`` with a random right-hand side
(seed 0), additive two-level Schwarz (:class:`ddops.TwoLevelSchwarz`), overlap
1 unless a table says otherwise, subdomains of about 32 x 32 unknowns in 2D
and 10 x 10 x 10 in 3D, the number of subdomains ``N`` growing at fixed
subdomain size (weak scaling).  Sections (``--sections``, run in this order):

``poisson2d``
    5-point finite differences (``poisson_2d(n)``), box subdomains
    (``Decomposition.from_grid``), ``N = 16 ... 1024``: iterations of one-level
    Schwarz, Nicolaides, GDSW and RGDSW (coarse dimensions) at overlap 1 and 2,
    and pyamg smoothed aggregation for reference.
``fem2d``
    Unstructured P1 Poisson (``fem_poisson_2d(n, mesh="unstructured")``),
    METIS with about 1024 unknowns per subdomain: the same columns.
``poisson3d``
    7-point finite differences, boxes of 10 x 10 x 10, ``N = 8, 64, 512``.
``elasticity``
    P1 plane-strain elasticity clamped on one side (``fem_elasticity_2d``,
    unstructured mesh), METIS with ``block_size=2``, about 1024 nodes per
    subdomain: GDSW with the three rigid body modes, with the two translations
    only and with the constant vector only.
``contrast``
    Diffusion with coefficient 1 and channels of coefficient 1e6 (one cell
    wide, every 8 cells, along ``x`` across every subdomain boundary normal to
    ``x``; touching the Dirichlet boundary, and floating with a margin of one
    cell), boxes of 32 x 32: one-level, GDSW, RGDSW and pyamg.
``memory``
    ``n = 10^6`` (2D Poisson, ``n = 1000`` per direction): every method in a
    fresh subprocess; peak memory of set-up + solve as the rise of the
    process's peak resident size (``VmHWM``, the counter ``ru_maxrss`` reads,
    without what ``ru_maxrss`` inherits from the forking parent) above its
    resident size once ``A`` and ``b`` are built (the peak mark is reset to
    the current resident size there by writing ``5`` to
    ``/proc/self/clear_refs``, so the transient peak of the assembly does not
    hide the preconditioner; where that is not possible the script says so),
    set-up and solve seconds, the time split of the set-up, and the ratios to
    pyamg's ``smoothed_aggregation_solver`` measured in the same run (also
    round by round, to show the noise).  GDSW (boxes) also in its hybrid form
    (``variant="hybrid"``), and both forms with float32 local factors
    (``factor_dtype="float32"``: the methods ``"gdsw boxes float32"`` and
    ``"gdsw boxes hybrid float32"``).
``setup``
    Set-up time (decomposition + preconditioner) of GDSW against ``nnz(A)``
    for ``n = 10^4 ... 10^6`` at fixed subdomain size, and the fitted exponent
    (log-log least squares), also per phase.
``huge``
    ``n = 3162`` per direction (10^7 unknowns), ``99 x 99`` boxes, GDSW, in a
    subprocess with a time limit (``--huge-timeout``, default 600 s): time and
    peak memory, or how far it got.  Not in the default sections.

Every measurement with a time runs ``--repeat`` times (default 1) and the
fastest is reported; iterations do not change between repeats.  The targets
of each section are printed last as ``MET`` / ``NOT MET`` with their numbers.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np
import scipy.sparse.linalg as spla

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import (  # noqa: E402
    add_json_flag,
    add_quick_flag,
    add_threads_flag,
    machine_summary,
    reset_peak,
)

RTOL = 1e-8
MAXITER = 5000
SECTIONS = ("poisson2d", "fem2d", "poisson3d", "elasticity", "contrast", "memory", "setup",
            "huge")
DEFAULT_SECTIONS = SECTIONS[:-1]


# -- small helpers -----------------------------------------------------------------------------
def _log(msg: str) -> None:
    print(msg, flush=True)


def _rss_mb() -> float:
    """Peak resident size of this process so far, in MiB.

    ``VmHWM`` of ``/proc/self/status``: the peak of this process's own memory, the counter
    ``ru_maxrss`` reads, without what ``ru_maxrss`` inherits across ``exec`` from the
    process that forked it.  ``ru_maxrss`` where ``/proc`` is missing.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _have_pyamg() -> bool:
    try:
        import pyamg  # noqa: F401
    except ImportError:
        return False
    return True


def _rhs(n: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(n)


def cg_solve(A, b, M) -> dict[str, Any]:
    """CG to ``RTOL`` from zero; iterations, seconds and the true relative residual."""
    count = [0]

    def callback(_xk):
        count[0] += 1

    start = time.perf_counter()
    x, info = spla.cg(A, b, rtol=RTOL, maxiter=MAXITER, M=M, callback=callback)
    seconds = time.perf_counter() - start
    relres = float(np.linalg.norm(b - A @ x) / np.linalg.norm(b))
    return {"iterations": count[0], "solve_s": seconds, "info": int(info), "relres": relres}


def _timed(fn, repeat: int):
    """``fn()`` ``repeat`` times; the result of the fastest run and its seconds."""
    best, best_t = None, math.inf
    for _ in range(max(1, repeat)):
        gc.collect()
        start = time.perf_counter()
        out = fn()
        t = time.perf_counter() - start
        if t < best_t:
            best, best_t = out, t
        del out
    return best, best_t


def fit_exponent(x, y) -> float:
    """Least-squares slope of ``log y`` against ``log x``."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    return float(np.polyfit(lx, ly, 1)[0])


def table(headers: list[str], rows: list[list[Any]]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


# -- building blocks ---------------------------------------------------------------------------
def grid_decomposition(n_shape: tuple[int, ...], parts: tuple[int, ...], overlap: int):
    """Box decomposition with the partition / overlap split of its time."""
    import ddops
    from ddops.dd.partition import grid_partition

    start = time.perf_counter()
    grid_partition(n_shape, parts)
    t_part = time.perf_counter() - start
    start = time.perf_counter()
    d = ddops.Decomposition.from_grid(n_shape, parts, overlap)
    t_all = time.perf_counter() - start
    # from_grid partitions again: the rest of its time is the overlap growth and packing
    return d, {"partition_s": t_part, "overlap_s": max(t_all - t_part, 0.0)}


def metis_decomposition(A, N: int, overlap: int, block_size: int = 1):
    """METIS decomposition with the partition / overlap split of its time."""
    import ddops
    from ddops.dd.partition import partition

    start = time.perf_counter()
    labels = partition(A, N, partitioner="metis", block_size=block_size)
    t_part = time.perf_counter() - start
    start = time.perf_counter()
    d = ddops.Decomposition.from_matrix(A, N, overlap, partitioner=labels,
                                        block_size=block_size)
    t_over = time.perf_counter() - start
    return d, {"partition_s": t_part, "overlap_s": t_over}


def schwarz(A, d, basis, null_space=None, variant="additive",
            factor_dtype="float64") -> tuple[Any, dict[str, float]]:
    import ddops

    if basis is None:
        M = ddops.TwoLevelSchwarz(A, d, coarse_basis=None, factor_dtype=factor_dtype)
    else:
        M = ddops.TwoLevelSchwarz(A, d, coarse_basis=basis, null_space=null_space,
                                  variant=variant, factor_dtype=factor_dtype)
    split = {
        "coarse_basis_s": float(getattr(M, "coarse_basis_seconds", 0.0)),
        "local_factor_s": float(M.local_setup_seconds),
        "coarse_factor_s": float(M.coarse_setup_seconds),
        "setup_s": float(M.setup_seconds),
        "coarse_dim": int(M.coarse_dim),
    }
    split["other_s"] = max(split["setup_s"] - split["coarse_basis_s"] - split["local_factor_s"]
                           - split["coarse_factor_s"], 0.0)
    return M, split


def pyamg_run(A, b, B=None, repeat: int = 1) -> dict[str, Any]:
    import pyamg

    def build():
        return pyamg.smoothed_aggregation_solver(A, B=B)

    ml, t_setup = _timed(build, repeat)
    res = cg_solve(A, b, ml.aspreconditioner(cycle="V"))
    res.update(setup_s=t_setup, levels=len(ml.levels), operator_complexity=float(
        ml.operator_complexity()))
    return res


def run_schwarz(A, b, d, basis, dsplit, null_space=None, repeat: int = 1, keep=None):
    """Set up (fastest of ``repeat``) and solve once; the time split of the set-up.

    With ``keep`` (a dict) the preconditioner is stored in it under ``basis``.
    """
    best = None
    for _ in range(max(1, repeat)):
        gc.collect()
        M, split = schwarz(A, d, basis, null_space)
        if best is None or split["setup_s"] < best[1]["setup_s"]:
            best = (M, split)
        else:
            del M
    M, split = best
    res = cg_solve(A, b, M)
    res.update(split)
    res.update(dsplit)
    if keep is not None:
        keep[basis] = M
    return res


def run_hybrid(A, b, kept: dict, bases=("gdsw", "rgdsw")) -> dict[str, Any]:
    """CG iterations with the hybrid form (``TwoLevelSchwarz(variant="hybrid")``) of each kept
    two-level preconditioner, on the same decomposition and coarse basis."""
    import ddops

    out = {}
    for basis in bases:
        H = ddops.TwoLevelSchwarz(A, kept[None].decomposition, variant="hybrid",
                                  coarse_basis=kept[basis].coarse_matrix)
        out[basis] = cg_solve(A, b, H)
    return out


# -- sections ----------------------------------------------------------------------------------
BASES_2D = (("one-level", None), ("nicolaides", "nicolaides"), ("gdsw", "gdsw"),
            ("rgdsw", "rgdsw"))


def _weak_rows(results, key_n, overlaps, with_amg):
    headers = ["N", "unknowns"]
    for ov in overlaps:
        headers += [f"1-level ov{ov}", f"Nicolaides ov{ov}", f"GDSW ov{ov} (n0)",
                    f"RGDSW ov{ov} (n0)", f"hybrid GDSW / RGDSW ov{ov}"]
    if with_amg:
        headers += ["pyamg SA"]
    rows = []
    for r in results:
        row = [r["N"], r[key_n]]
        for ov in overlaps:
            m = r["overlap"][str(ov)]
            row += [m["one-level"]["iterations"], m["nicolaides"]["iterations"],
                    f"{m['gdsw']['iterations']} ({m['gdsw']['coarse_dim']})",
                    f"{m['rgdsw']['iterations']} ({m['rgdsw']['coarse_dim']})",
                    f"{r['hybrid'][str(ov)]['gdsw']['iterations']} / "
                    f"{r['hybrid'][str(ov)]['rgdsw']['iterations']}"]
        if with_amg:
            row.append(r["pyamg"]["iterations"] if r.get("pyamg") else "-")
        rows.append(row)
    return table(headers, rows)


def _time_rows(results):
    headers = ["N", "unknowns", "method", "decomposition s", "coarse basis s", "local factor s",
               "coarse factor s", "TwoLevelSchwarz s", "solve s"]
    rows = []
    for r in results:
        for name in ("gdsw", "rgdsw"):
            m = r["overlap"]["1"][name]
            rows.append([r["N"], r["unknowns"], name.upper(),
                         m["partition_s"] + m["overlap_s"], m["coarse_basis_s"],
                         m["local_factor_s"], m["coarse_factor_s"], m["setup_s"], m["solve_s"]])
        if r.get("pyamg"):
            rows.append([r["N"], r["unknowns"], "pyamg SA", "-", "-", "-", "-",
                         r["pyamg"]["setup_s"], r["pyamg"]["solve_s"]])
    return table(headers, rows)


def _overlap_study(A, b, r: dict, tag: str, repeat: int, decompose) -> Any:
    """Every 2D coarse basis and the hybrid forms at overlaps 1 and 2, into ``r``.

    ``decompose(overlap)`` returns ``(decomposition, split times)``; the last
    decomposition is returned.
    """
    for ov in (1, 2):
        d, dsplit = decompose(ov)
        kept: dict = {}
        r["overlap"][str(ov)] = {name: run_schwarz(A, b, d, basis, dsplit, repeat=repeat,
                                                   keep=kept) for name, basis in BASES_2D}
        r["hybrid"][str(ov)] = run_hybrid(A, b, kept)
        del kept
        m = r["overlap"][str(ov)]
        _log(f"  {tag} n={A.shape[0]} ov={ov}: " + ", ".join(
            f"{k} {v['iterations']}" for k, v in m.items()) + ", hybrid " + ", ".join(
            f"{k} {v['iterations']}" for k, v in r["hybrid"][str(ov)].items()))
    return d


def section_poisson2d(args) -> dict[str, Any]:
    from ddops.problems import poisson_2d

    parts = (4, 8) if args.quick else (4, 8, 16, 32)
    out = []
    for P in parts:
        n = 32 * P
        A = poisson_2d(n)
        b = _rhs(A.shape[0])
        r = {"N": P * P, "n_per_dir": n, "unknowns": A.shape[0], "nnz": A.nnz, "overlap": {},
             "hybrid": {}}
        d = _overlap_study(A, b, r, f"poisson2d N={P * P}", args.repeat,
                           lambda ov, n=n, P=P: grid_decomposition((n, n), (P, P), ov))
        r["pyamg"] = pyamg_run(A, b, repeat=args.repeat) if _have_pyamg() else None
        out.append(r)
        del A, d
    txt = ("2D Poisson, finite differences, boxes of 32 x 32 (CG iterations, coarse dimension "
           "n0):\n\n" + _weak_rows(out, "unknowns", (1, 2), True)
           + "\n\nTimes (overlap 1, seconds; TwoLevelSchwarz = its set-up without the "
           "decomposition, pyamg = its whole set-up):\n\n" + _time_rows(out))
    return {"results": out, "text": txt}


def section_fem2d(args) -> dict[str, Any]:
    from ddops.problems.fem import fem_poisson_2d

    sizes = (64, 128) if args.quick else tuple(args.fem_sizes)
    out = []
    for n in sizes:
        A, _ = fem_poisson_2d(n, mesh="unstructured")
        b = _rhs(A.shape[0])
        N = max(2, round(A.shape[0] / 1024))
        r = {"N": N, "n_per_dir": n, "unknowns": A.shape[0], "nnz": A.nnz, "overlap": {},
             "hybrid": {}}
        d = _overlap_study(A, b, r, f"fem2d N={N}", args.repeat,
                           lambda ov, A=A, N=N: metis_decomposition(A, N, ov))
        r["pyamg"] = pyamg_run(A, b, repeat=args.repeat) if _have_pyamg() else None
        out.append(r)
        del A, d
    txt = ("2D Poisson, unstructured P1, METIS, about 1024 unknowns per subdomain:\n\n"
           + _weak_rows(out, "unknowns", (1, 2), True)
           + "\n\nTimes (overlap 1, seconds; TwoLevelSchwarz = its set-up without the "
           "decomposition, pyamg = its whole set-up):\n\n" + _time_rows(out))
    return {"results": out, "text": txt}


def section_poisson3d(args) -> dict[str, Any]:
    from ddops.problems import poisson_3d

    parts = (2, 4) if args.quick else (2, 4, 8)
    out = []
    for P in parts:
        n = 10 * P
        A = poisson_3d(n)
        b = _rhs(A.shape[0])
        d, dsplit = grid_decomposition((n, n, n), (P, P, P), 1)
        r = {"N": P**3, "n_per_dir": n, "unknowns": A.shape[0]}
        kept: dict = {}
        for name, basis in (("one-level", None), ("gdsw", "gdsw"), ("rgdsw", "rgdsw")):
            r[name] = run_schwarz(A, b, d, basis, dsplit, repeat=args.repeat, keep=kept)
        r["hybrid"] = run_hybrid(A, b, kept)
        del kept
        _log(f"  poisson3d N={P**3} n={A.shape[0]}: " + ", ".join(
            f"{k} {r[k]['iterations']}" for k in ("one-level", "gdsw", "rgdsw")))
        out.append(r)
        del A, d
    rows = [[r["N"], r["unknowns"], r["one-level"]["iterations"],
             f"{r['gdsw']['iterations']} ({r['gdsw']['coarse_dim']})",
             f"{r['rgdsw']['iterations']} ({r['rgdsw']['coarse_dim']})",
             f"{r['hybrid']['gdsw']['iterations']} / {r['hybrid']['rgdsw']['iterations']}",
             r["gdsw"]["setup_s"], r["gdsw"]["solve_s"]] for r in out]
    txt = ("3D Poisson, 7-point finite differences, boxes of 10 x 10 x 10, overlap 1:\n\n"
           + table(["N", "unknowns", "1-level", "GDSW (n0)", "RGDSW (n0)",
                    "hybrid GDSW / RGDSW", "GDSW set-up s", "GDSW solve s"], rows))
    return {"results": out, "text": txt}


def section_elasticity(args) -> dict[str, Any]:
    from ddops.problems import rigid_body_modes
    from ddops.problems.fem import fem_elasticity_2d

    sizes = (64, 128) if args.quick else (128, 256, 512)
    out = []
    for n in sizes:
        A, coords = fem_elasticity_2d(n, mesh="unstructured")
        b = _rhs(A.shape[0])
        nodes = coords.shape[0]
        N = 4 ** max(1, round(math.log(nodes / 1024, 4)))  # 16, 64, 256: ~1024 nodes each
        rbm = rigid_body_modes(coords)
        spaces = {"rbm": rbm, "translations": rbm[:, :2], "constants": np.ones((A.shape[0], 1))}
        d, dsplit = metis_decomposition(A, N, 1, block_size=2)
        r = {"N": N, "n_per_dir": n, "nodes": nodes, "unknowns": A.shape[0]}
        kept: dict = {}
        r["one-level"] = run_schwarz(A, b, d, None, dsplit, repeat=args.repeat, keep=kept)
        for key, Z in spaces.items():
            r[key] = run_schwarz(A, b, d, "gdsw", dsplit, null_space=Z, repeat=args.repeat,
                                 keep=kept if key == "rbm" else None)
        r["hybrid_rbm"] = run_hybrid(A, b, kept, bases=("gdsw",))["gdsw"]
        del kept
        r["rgdsw_rbm"] = run_schwarz(A, b, d, "rgdsw", dsplit, null_space=rbm,
                                     repeat=args.repeat)
        r["pyamg"] = pyamg_run(A, b, B=rbm, repeat=args.repeat) if _have_pyamg() else None
        _log(f"  elasticity N={N} dofs={A.shape[0]}: " + ", ".join(
            f"{k} {r[k]['iterations']}" for k in ("one-level", "rbm", "translations",
                                                    "constants", "rgdsw_rbm", "hybrid_rbm")))
        out.append(r)
        del A, d
    rows = [[r["N"], r["unknowns"], r["one-level"]["iterations"],
             f"{r['rbm']['iterations']} ({r['rbm']['coarse_dim']})",
             f"{r['translations']['iterations']} ({r['translations']['coarse_dim']})",
             f"{r['constants']['iterations']} ({r['constants']['coarse_dim']})",
             f"{r['rgdsw_rbm']['iterations']} ({r['rgdsw_rbm']['coarse_dim']})",
             r["hybrid_rbm"]["iterations"],
             r["pyamg"]["iterations"] if r["pyamg"] else "-"] for r in out]
    txt = ("2D linear elasticity (P1, plane strain, E = 1, nu = 0.3, clamped at x = 0), "
           "unstructured mesh, METIS with block_size=2, about 1024 nodes per subdomain, "
           "overlap 1:\n\n"
           + table(["N", "dofs", "1-level", "GDSW rbm (n0)", "GDSW translations (n0)",
                    "GDSW constants (n0)", "RGDSW rbm (n0)", "hybrid GDSW rbm",
                    "pyamg SA (B = rbm)"], rows))
    return {"results": out, "text": txt}


def section_contrast(args) -> dict[str, Any]:
    from ddops.problems import diffusion_2d, high_contrast_channels

    parts = (4, 8) if args.quick else (8, 16)
    out = []
    for margin in (0, 1):
        for P in parts:
            n = 32 * P - 1  # n + 1 = 32 P cells: channel rows aligned with the boxes
            coef = high_contrast_channels(n, contrast=1e6, period=8, width=1, margin=margin)
            A = diffusion_2d(coef)
            b = _rhs(A.shape[0])
            d, dsplit = grid_decomposition((n, n), (P, P), 1)
            r = {"N": P * P, "unknowns": A.shape[0], "margin": margin}
            for name, basis in (("one-level", None), ("gdsw", "gdsw"), ("rgdsw", "rgdsw")):
                r[name] = run_schwarz(A, b, d, basis, dsplit, repeat=args.repeat)
            r["pyamg"] = pyamg_run(A, b, repeat=args.repeat) if _have_pyamg() else None
            _log(f"  contrast margin={margin} N={P * P} n={A.shape[0]}: " + ", ".join(
                f"{k} {r[k]['iterations']}" for k in ("one-level", "gdsw", "rgdsw")) +
                (f", pyamg {r['pyamg']['iterations']}" if r["pyamg"] else ""))
            out.append(r)
            del A, d

    def cell(m):
        s = str(m["iterations"])
        if m["info"] != 0:
            s += " (no conv.)"
        return s

    rows = [["touching" if r["margin"] == 0 else "floating", r["N"], r["unknowns"],
             cell(r["one-level"]), f"{cell(r['gdsw'])} ({r['gdsw']['coarse_dim']})",
             f"{cell(r['rgdsw'])} ({r['rgdsw']['coarse_dim']})",
             cell(r["pyamg"]) if r["pyamg"] else "-"] for r in out]
    txt = ("High-contrast diffusion 2D (coefficient 1e6 in channels of one cell every 8 cells "
           "along x, 1 elsewhere), boxes of 32 x 32, overlap 1:\n\n"
           + table(["channels", "N", "unknowns", "1-level", "GDSW (n0)", "RGDSW (n0)",
                    "pyamg SA"], rows))
    return {"results": out, "text": txt}


# -- subprocess measurements (memory, 10^7) ----------------------------------------------------
def child_main(spec: dict[str, Any]) -> None:
    """Build the problem, reset the peak, set up and solve; print ``RESULT <json>`` last."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(spec["threads"]):
        _child(spec)


def _child(spec: dict[str, Any]) -> None:
    from ddops.problems import poisson_2d

    t0 = time.perf_counter()
    n = spec["n"]
    A = poisson_2d(n)
    b = _rhs(A.shape[0])
    gc.collect()
    out: dict[str, Any] = {"spec": spec, "unknowns": A.shape[0], "nnz": A.nnz,
                           "assembly_s": time.perf_counter() - t0,
                           "peak_before_reset_mb": _rss_mb()}
    out["peak_reset"] = reset_peak()
    base = _rss_mb()
    out["baseline_mb"] = base
    _log(f"PROGRESS assembled n={A.shape[0]} in {out['assembly_s']:.1f} s, baseline "
         f"{base:.0f} MiB")
    method = spec["method"]
    start = time.perf_counter()
    cpu_start = time.process_time()  # CPU seconds: less sensitive to a loaded machine
    if method == "pyamg":
        import pyamg

        ml = pyamg.smoothed_aggregation_solver(A)
        M = ml.aspreconditioner(cycle="V")
        out.update(setup_s=time.perf_counter() - start, levels=len(ml.levels),
                   operator_complexity=float(ml.operator_complexity()))
    else:
        P = spec["parts"]
        if spec["decomposition"] == "boxes":
            d, dsplit = grid_decomposition((n, n), (P, P), 1)
        else:
            d, dsplit = metis_decomposition(A, P * P, 1)
        out.update(dsplit)
        _log(f"PROGRESS decomposition {dsplit['partition_s'] + dsplit['overlap_s']:.1f} s, "
             f"peak {_rss_mb() - base:.0f} MiB above baseline")
        if spec.get("phases"):
            _child_phases(A, b, d, method, base, out)
            print("RESULT " + json.dumps(out), flush=True)
            return
        if spec.get("profile"):
            import cProfile
            import pstats

            prof = cProfile.Profile()
            M, split = prof.runcall(schwarz, A, d, method)
            for order in ("tottime", "cumulative"):
                pstats.Stats(prof).sort_stats(order).print_stats(20)
        else:
            M, split = schwarz(A, d, method, variant=spec.get("variant", "additive"),
                               factor_dtype=spec.get("factor_dtype", "float64"))
        out.update(split)
        out["factor_bytes"] = int(M.factor_bytes)
        out["setup_s"] = time.perf_counter() - start
        out["local_solver"] = M.local_solver
        out["coarse_solver"] = M.coarse_solver
    out["setup_peak_mb"] = _rss_mb() - base
    _log(f"PROGRESS set-up {out['setup_s']:.1f} s, peak {out['setup_peak_mb']:.0f} MiB above "
         "baseline")
    out["setup_cpu_s"] = time.process_time() - cpu_start
    cpu_solve = time.process_time()
    out.update(cg_solve(A, b, M))
    out["solve_cpu_s"] = time.process_time() - cpu_solve
    out["total_cpu_s"] = out["setup_cpu_s"] + out["solve_cpu_s"]
    out["peak_mb"] = _rss_mb() - base
    out["peak_abs_mb"] = _rss_mb()
    out["total_s"] = out["setup_s"] + out["solve_s"]
    _log(f"PROGRESS solve {out['iterations']} iterations in {out['solve_s']:.1f} s, peak "
         f"{out['peak_mb']:.0f} MiB above baseline")
    print("RESULT " + json.dumps(out), flush=True)


def _current_rss_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return math.nan


def _child_phases(A, b, d, method: str, base: float, out: dict[str, Any]) -> None:
    """Memory and time of each phase: held after it (RSS) and its own peak above its start."""
    import ddops

    phases: list[dict[str, Any]] = []

    def phase(name, fn):
        gc.collect()
        start_rss = _current_rss_mb()
        reset_peak()
        t = time.perf_counter()
        res = fn()
        t = time.perf_counter() - t
        phases.append({"phase": name, "seconds": t, "held_mb": _current_rss_mb() - base,
                       "peak_above_start_mb": _rss_mb() - start_rss,
                       "peak_above_baseline_mb": _rss_mb() - base})
        return res

    held = {"Phi": phase("coarse basis (ddops.coarse_basis)",
                         lambda: ddops.coarse_basis(d, method, A=A))}
    phases[-1]["nnz_phi"] = int(held["Phi"].nnz)
    M = phase("TwoLevelSchwarz with that Phi (local + coarse factorisation)",
              lambda: ddops.TwoLevelSchwarz(A, d, coarse_basis=held.pop("Phi")))
    phase("CG solve", lambda: cg_solve(A, b, M))
    out["phases"] = phases


def run_child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter; on timeout, what it printed so far."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1)
    lines: list[str] = []
    result = None
    try:
        deadline = start + timeout
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise subprocess.TimeoutExpired(cmd, timeout)
            if not sel.select(timeout=min(left, 5.0)):
                if proc.poll() is not None:
                    break
                continue
            line = proc.stdout.readline()
            if not line:
                break
            line = line.rstrip("\n")
            if line.startswith("RESULT "):
                result = json.loads(line[7:])
            else:
                lines.append(line)
                if line.startswith("PROGRESS"):
                    _log(f"    [{spec['method']}] {line[9:]}")
        proc.wait()
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return {"spec": spec, "error": f"timed out after {timeout:.0f} s",
                "progress": [x for x in lines if x.startswith("PROGRESS")],
                "wall_s": time.perf_counter() - start}
    if result is None:
        return {"spec": spec, "error": f"exit status {proc.returncode}",
                "output_tail": lines[-20:], "wall_s": time.perf_counter() - start}
    result["wall_s"] = time.perf_counter() - start
    result["output"] = [x for x in lines if not x.startswith("PROGRESS")]
    return result


MEMORY_METHODS = ("gdsw boxes", "gdsw metis", "rgdsw boxes", "gdsw boxes hybrid",
                  "gdsw boxes float32", "gdsw boxes hybrid float32")


def _memory_key(spec: dict[str, Any]) -> str:
    """``"pyamg"``, or method, decomposition and (when not additive) variant."""
    if spec["method"] == "pyamg":
        return "pyamg"
    key = f"{spec['method']} {spec['decomposition']}"
    if spec.get("variant", "additive") != "additive":
        key += f" {spec['variant']}"
    if spec.get("factor_dtype", "float64") != "float64":  # mixed-precision local solves
        key += f" {spec['factor_dtype']}"
    return key


def section_memory(args) -> dict[str, Any]:
    n = 300 if args.quick else 1000
    P = max(1, round(n / 32))
    specs = [{"method": "pyamg", "n": n}] if _have_pyamg() else []
    specs += [{"method": "gdsw", "n": n, "parts": P, "decomposition": "boxes"},
              {"method": "gdsw", "n": n, "parts": P, "decomposition": "metis"},
              {"method": "rgdsw", "n": n, "parts": P, "decomposition": "boxes"},
              {"method": "gdsw", "n": n, "parts": P, "decomposition": "boxes",
               "variant": "hybrid"},
              {"method": "gdsw", "n": n, "parts": P, "decomposition": "boxes",
               "factor_dtype": "float32"},
              {"method": "gdsw", "n": n, "parts": P, "decomposition": "boxes",
               "variant": "hybrid", "factor_dtype": "float32"}]
    specs = [s for s in specs if s["method"] == "pyamg" or args.memory_methods is None
             or _memory_key(s) in args.memory_methods]
    runs: dict[str, list[dict[str, Any]]] = {}
    for rep in range(max(1, args.repeat)):  # interleaved: the machine's load hits all alike
        for spec in specs:
            spec = dict(spec, threads=args.threads)
            key = _memory_key(spec)
            _log(f"  memory {key} (run {rep + 1})")
            runs.setdefault(key, []).append(run_child(spec, args.child_timeout))
    _log("  memory: GDSW boxes phase by phase")
    phases = run_child({"method": "gdsw", "n": n, "parts": P, "decomposition": "boxes",
                        "threads": args.threads, "phases": True}, args.child_timeout)
    best = {}
    for key, rs in runs.items():
        ok = [r for r in rs if "error" not in r]
        if not ok:
            best[key] = rs[0]
            continue
        b = dict(min(ok, key=lambda r: r["total_s"]))
        b["peak_mb"] = min(r["peak_mb"] for r in ok)  # deterministic up to allocator noise
        b["all_total_s"] = [r["total_s"] for r in ok]
        best[key] = b
    amg = best.get("pyamg")
    rows, split_rows = [], []
    for key, r in best.items():
        if "error" in r:
            rows.append([key, r["error"]] + ["-"] * 8)
            continue
        ok_amg = amg is not None and "error" not in amg
        mem_ratio = r["peak_mb"] / max(amg["peak_mb"], 1.0) if ok_amg else math.nan
        t_ratio = r["total_s"] / amg["total_s"] if ok_amg else math.nan
        rows.append([key, r.get("coarse_dim", "-"), r["iterations"], r["peak_mb"],
                     1024**2 * r["peak_mb"] / r["unknowns"], mem_ratio, r["setup_s"],
                     r["solve_s"], r["total_s"], t_ratio])
        if key != "pyamg":
            split_rows.append([key, r["partition_s"], r["overlap_s"], r["local_factor_s"],
                               r["coarse_basis_s"], r["coarse_factor_s"], r["other_s"],
                               r["solve_s"], r["solve_s"] / max(r["iterations"], 1) * 1e3])
    # the ratio to pyamg round by round (each round runs every method once, back to back):
    # its spread shows the noise of the shared machine
    round_rows = []
    amg_runs = runs.get("pyamg", [])
    for key, rs in runs.items():
        if key == "pyamg" or not amg_runs:
            continue
        pairs = [(r, a) for r, a in zip(rs, amg_runs) if "error" not in r and "error" not in a]
        ratios = [r["total_s"] / a["total_s"] for r, a in pairs]
        cpu = [r["total_cpu_s"] / a["total_cpu_s"] for r, a in pairs]
        if ratios:
            round_rows.append([key, " ".join(f"{x:.2f}" for x in ratios),
                               float(np.median(ratios)), " ".join(f"{x:.2f}" for x in cpu),
                               float(np.median(cpu))])
    reset = all(r.get("peak_reset", False) for r in best.values() if "error" not in r)
    method = ("peak = the process's peak RSS at the end (VmHWM, the counter ru_maxrss reads) "
              "minus its RSS once A and b are built, the peak mark reset to the current RSS at "
              "that point (/proc/self/clear_refs)" if reset else
              "peak = ru_maxrss at the end minus ru_maxrss once A and b are built (peak reset "
              "impossible here: the assembly's transient peak may hide part of the "
              "preconditioner)")
    txt = (f"2D Poisson n = {n}^2 = {n * n} unknowns, {P} x {P} subdomains, overlap 1, each "
           f"method in a fresh process ({method}); best of {max(1, args.repeat)} by set-up + "
           "solve:\n\n"
           + table(["method", "n0", "iterations", "peak MiB", "bytes/unknown",
                    "memory / pyamg", "set-up s", "solve s", "set-up + solve s",
                    "time / pyamg"], rows)
           + "\n\nSet-up + solve / pyamg's in each round (the same round's pyamg run):\n\n"
           + table(["method", "wall-time ratio per round", "median",
                    "CPU-time ratio per round", "median CPU"], round_rows)
           + "\n\nWhere the time goes (seconds):\n\n"
           + table(["method", "partition", "overlap", "local factorisation", "coarse basis",
                    "coarse factorisation", "other set-up", "solve", "ms / iteration"],
                   split_rows))
    if "phases" in phases:
        prow = [["decomposition (from_grid)", phases["partition_s"] + phases["overlap_s"],
                 "-", "-", "-"]]
        prow += [[p["phase"], p["seconds"], p["held_mb"], p["peak_above_start_mb"],
                  p["peak_above_baseline_mb"]] for p in phases["phases"]]
        txt += ("\n\nGDSW (boxes) phase by phase in one fresh process (MiB; held = resident "
                "size after the phase minus the baseline, peak = the phase's own peak above "
                "its start and above the baseline; nnz(Phi) = "
                f"{phases['phases'][0]['nnz_phi']}):\n\n"
                + table(["phase", "seconds", "held MiB", "peak above start MiB",
                         "peak above baseline MiB"], prow))
    else:
        txt += f"\n\nphase-by-phase run failed: {phases.get('error')}"
    medians = {row[0]: {"wall": row[2], "cpu": row[4]} for row in round_rows}
    return {"results": best, "runs": runs, "phases": phases, "n": n, "parts": P,
            "method": method, "round_medians": medians, "text": txt}


def section_setup(args) -> dict[str, Any]:
    from ddops.problems import poisson_2d

    sizes = (100, 200, 400) if args.quick else (100, 141, 200, 316, 447, 632, 1000)
    out = []
    for n in sizes:
        A = poisson_2d(n)
        P = max(1, round(n / 32))
        best = None
        for _ in range(max(2, args.repeat)):
            gc.collect()
            start = time.perf_counter()
            d, dsplit = grid_decomposition((n, n), (P, P), 1)
            M, split = schwarz(A, d, "gdsw")
            total = time.perf_counter() - start
            if best is None or total < best["total_s"]:
                best = dict(split, **dsplit, total_s=total)
            del M, d
        best.update(n_per_dir=n, unknowns=A.shape[0], nnz=A.nnz, N=P * P)
        _log(f"  setup n={A.shape[0]} N={P * P}: {best['total_s']:.2f} s")
        out.append(best)
        del A
    nnz = [r["nnz"] for r in out]
    phases = ("total_s", "partition_s", "overlap_s", "coarse_basis_s", "local_factor_s",
              "coarse_factor_s")
    expo = {p: fit_exponent(nnz, [max(r[p], 1e-6) for r in out]) for p in phases}
    rows = [[r["unknowns"], r["N"], r["nnz"], r["partition_s"] + r["overlap_s"],
             r["coarse_basis_s"], r["local_factor_s"], r["coarse_factor_s"], r["total_s"],
             1e6 * r["total_s"] / r["nnz"]] for r in out]
    txt = ("GDSW set-up (decomposition + TwoLevelSchwarz), 2D Poisson, boxes of about 32 x 32, "
           f"best of {max(2, args.repeat)}:\n\n"
           + table(["unknowns", "N", "nnz", "decomposition s", "coarse basis s",
                    "local factor s", "coarse factor s", "set-up s", "us / nnz"], rows)
           + "\n\nFitted exponent of time against nnz: " + ", ".join(
               f"{p[:-2]} {e:.2f}" for p, e in expo.items()))
    return {"results": out, "exponents": expo, "text": txt}


def section_huge(args) -> dict[str, Any]:
    n = 1000 if args.quick else 3162
    P = 31 if args.quick else 99
    spec = {"method": "gdsw", "n": n, "parts": P, "decomposition": "boxes",
            "threads": args.threads}
    _log(f"  huge n={n * n}, {P} x {P} subdomains, limit {args.huge_timeout:.0f} s")
    r = run_child(spec, args.huge_timeout)
    if "error" in r:
        txt = (f"Large run (n = {n}^2, {P * P} subdomains): {r['error']}; progress:\n\n"
               + "\n".join("    " + x for x in r.get("progress", r.get("output_tail", []))))
    else:
        txt = (f"2D Poisson n = {n}^2 = {r['unknowns']} unknowns, {P} x {P} = {P * P} boxes, "
               f"GDSW, overlap 1 (fresh process):\n\n"
               + table(["n0", "iterations", "assembly s", "decomposition s", "coarse basis s",
                        "local factor s", "coarse factor s", "set-up s", "solve s",
                        "peak MiB above A, b", "peak MiB total", "bytes/unknown"],
                       [[r["coarse_dim"], r["iterations"], r["assembly_s"],
                         r["partition_s"] + r["overlap_s"], r["coarse_basis_s"],
                         r["local_factor_s"], r["coarse_factor_s"], r["setup_s"],
                         r["solve_s"], r["peak_mb"], r["peak_abs_mb"],
                         1024**2 * r["peak_mb"] / r["unknowns"]]]))
    return {"result": r, "text": txt}


# -- targets -----------------------------------------------------------------------------------
def _verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def targets(res: dict[str, Any]) -> list[str]:
    lines = []
    for sec, label in (("poisson2d", "2D Poisson FD"), ("fem2d", "2D Poisson P1 unstructured")):
        if sec not in res:
            continue
        rs = res[sec]["results"]
        g = [r["overlap"]["1"]["gdsw"]["iterations"] for r in rs]
        rg = [r["overlap"]["1"]["rgdsw"]["iterations"] for r in rs]
        g2 = [r["overlap"]["2"]["gdsw"]["iterations"] for r in rs]
        one = [r["overlap"]["1"]["one-level"]["iterations"] for r in rs]
        n0g = [r["overlap"]["1"]["gdsw"]["coarse_dim"] for r in rs]
        n0r = [r["overlap"]["1"]["rgdsw"]["coarse_dim"] for r in rs]
        Ns = [r["N"] for r in rs]
        lines.append(f"{label}: GDSW <= 55 for N = {Ns[0]}..{Ns[-1]}: {_verdict(max(g) <= 55)} "
                     f"(max {max(g)})")
        lines.append(f"{label}: GDSW max/min <= 1.4: {_verdict(max(g) <= 1.4 * min(g))} "
                     f"({max(g) / min(g):.2f})")
        lines.append(f"{label}: RGDSW <= 60 with fewer coarse functions: "
                     f"{_verdict(max(rg) <= 60 and all(a < b for a, b in zip(n0r, n0g)))} "
                     f"(max {max(rg)}, n0 {n0r[-1]} vs {n0g[-1]})")
        lines.append(f"{label}: overlap 2 better than 1 (GDSW): "
                     f"{_verdict(all(a < b for a, b in zip(g2, g)))} ({g2} vs {g})")
        if len(Ns) > 1:
            lines.append(f"{label}: one-level grows like N^{fit_exponent(Ns, one):.2f} "
                         f"(expected about N^0.5): {one}")
    if "poisson3d" in res:
        g = [r["gdsw"]["iterations"] for r in res["poisson3d"]["results"]]
        lines.append(f"3D Poisson: GDSW <= 40: {_verdict(max(g) <= 40)} (max {max(g)}: {g})")
    if "elasticity" in res:
        rs = res["elasticity"]["results"]
        g = [r["rbm"]["iterations"] for r in rs]
        tr = [r["translations"]["iterations"] for r in rs]
        co = [r["constants"]["iterations"] for r in rs]
        lines.append(f"elasticity: GDSW rbm <= 45: {_verdict(max(g) <= 45)} (max {max(g)}: {g})")
        lines.append(f"elasticity: GDSW rbm flat (max/min <= 1.4): "
                     f"{_verdict(max(g) <= 1.4 * min(g))} ({max(g) / min(g):.2f})")
        lines.append(f"elasticity: translations / constants visibly worse: "
                     f"{_verdict(tr[-1] > g[-1] and co[-1] > g[-1])} "
                     f"(largest N: {g[-1]} vs {tr[-1]} vs {co[-1]})")
    if "contrast" in res:
        for r in res["contrast"]["results"]:
            lines.append(f"high contrast (baseline, no target) channels "
                         f"{'touching' if r['margin'] == 0 else 'floating'} N={r['N']}: GDSW "
                         f"{r['gdsw']['iterations']}, RGDSW {r['rgdsw']['iterations']}, pyamg "
                         f"{r['pyamg']['iterations'] if r['pyamg'] else '-'}")
    if "memory" in res:
        best = res["memory"]["results"]
        amg = best.get("pyamg")
        for key in ("gdsw boxes", "gdsw metis", "gdsw boxes hybrid", "gdsw boxes float32",
                    "gdsw boxes hybrid float32"):
            r = best.get(key)
            if not amg or not r or "error" in r or "error" in amg:
                continue
            mr = r["peak_mb"] / max(amg["peak_mb"], 1.0)
            tr_ = r["total_s"] / amg["total_s"]
            lines.append(f"memory at {r['unknowns']} unknowns, {key}: <= 2x pyamg: "
                         f"{_verdict(mr <= 2)} ({r['peak_mb']:.0f} vs {amg['peak_mb']:.0f} MiB, "
                         f"{mr:.2f}x)")
            med = res["memory"].get("round_medians", {}).get(key)
            rounds = (f"; median of the rounds {med['wall']:.2f}x wall time, {med['cpu']:.2f}x "
                      "CPU time" if med else "")
            lines.append(f"time at {r['unknowns']} unknowns, {key}: set-up + solve <= 2x pyamg: "
                         f"{_verdict(tr_ <= 2)} (best runs {r['total_s']:.2f} vs "
                         f"{amg['total_s']:.2f} s, {tr_:.2f}x{rounds})")
    if "setup" in res:
        e = res["setup"]["exponents"]["total_s"]
        lines.append(f"set-up O(nnz): fitted exponent <= 1.1: {_verdict(e <= 1.1)} ({e:.2f})")
    if "huge" in res:
        r = res["huge"]["result"]
        n_huge = r["spec"]["n"] ** 2
        if "error" in r:
            lines.append(f"{n_huge} unknowns: NOT MET ({r['error']})")
        else:
            lines.append(f"{n_huge} unknowns: MET ({r['unknowns']} unknowns, set-up "
                         f"{r['setup_s']:.0f} s, solve {r['solve_s']:.0f} s, "
                         f"{r['iterations']} iterations, peak {r['peak_abs_mb'] / 1024:.1f} GiB)")
    return lines


# -- driver ------------------------------------------------------------------------------------
def _machine() -> str:
    return machine_summary(memory=True, pyamg=True, ddops=True, load=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=None,
                   help="sections to run, in the script's order (default: all but huge)")
    p.add_argument("--huge", action="store_true", help="also run the 10^7 section (last)")
    add_quick_flag(p, "small sizes: a smoke run")
    add_json_flag(p, "write everything measured to PATH (rewritten after every section)")
    p.add_argument("--repeat", type=int, default=1,
                   help="timed runs per measurement, fastest kept (default 1)")
    add_threads_flag(p, "BLAS threads (threadpoolctl; default 1)")
    p.add_argument("--fem-sizes", type=int, nargs="+", default=[128, 256, 512, 1024],
                   help="grid points per direction of the unstructured P1 meshes")
    p.add_argument("--memory-methods", nargs="+", choices=MEMORY_METHODS, default=None,
                   help="memory section: the Schwarz methods to run beside pyamg (default: all)")
    p.add_argument("--child-timeout", type=float, default=600.0,
                   help="seconds per subprocess measurement of the memory section")
    p.add_argument("--huge-timeout", type=float, default=600.0,
                   help="seconds allowed to the 10^7 run")
    p.add_argument("--profile", action="store_true",
                   help="memory section: cProfile of the GDSW set-up (boxes) in its subprocess")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.child:
        child_main(json.loads(args.child))
        return 0
    if args.repeat < 1 or args.threads < 1:
        print("error: --repeat and --threads must be >= 1", file=sys.stderr)
        return 2
    sections = list(args.sections or DEFAULT_SECTIONS)
    if args.huge and "huge" not in sections:
        sections.append("huge")
    sections = [s for s in SECTIONS if s in sections]
    from threadpoolctl import threadpool_limits

    _log("machine: " + _machine())
    res: dict[str, Any] = {"machine": _machine(), "argv": sys.argv[1:]}
    funcs = {s: globals()[f"section_{s}"] for s in SECTIONS}
    for s in sections:
        _log(f"== {s}")
        start = time.perf_counter()
        with threadpool_limits(args.threads):
            if s == "memory" and args.profile:
                _profile_memory(args)
            res[s] = funcs[s](args)
        res[s]["seconds"] = time.perf_counter() - start
        _log(res[s]["text"] + f"\n\n({s}: {res[s]['seconds']:.0f} s)\n")
        if args.json:
            _write_json(args.json, res)
    res["targets"] = targets(res)
    _log("== targets")
    for line in res["targets"]:
        _log("  " + line)
    load = os.getloadavg() if hasattr(os, "getloadavg") else ()
    _log("load average at the end: " + " ".join(f"{x:.2f}" for x in load))
    if args.json:
        _write_json(args.json, res)
    return 0


def _profile_memory(args) -> None:
    n = 300 if args.quick else 1000
    spec = {"method": "gdsw", "n": n, "parts": max(1, round(n / 32)), "decomposition": "boxes",
            "threads": args.threads, "profile": True}
    r = run_child(spec, args.child_timeout)
    _log("cProfile of the GDSW set-up (TwoLevelSchwarz, boxes), cumulative:\n"
         + "\n".join(r.get("output", r.get("output_tail", []))))


def _write_json(path: str, res: dict[str, Any]) -> None:
    from ddops.io import atomic_write_json

    atomic_write_json(path, res)


if __name__ == "__main__":
    sys.exit(main())
