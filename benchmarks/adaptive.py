"""Adaptive coarse spaces (AGDSW, GenEO) against GDSW and algebraic multigrid at high contrast.

Run from the repository root::

    python benchmarks/adaptive.py                          # every section (~18 min, 2 cores)
    python benchmarks/adaptive.py --quick                  # smoke run, small sizes (~2-3 min)
    python benchmarks/adaptive.py --sections contrast2d cost --json results/adaptive.json

CG (scipy) to ``rtol = 1e-8`` from ``x0 = 0`` with a random right-hand side (seed 0),
at most ``--maxiter`` iterations (default 2000; a count that reached it is printed as
``>2000``), two-level Schwarz (:class:`ddops.TwoLevelSchwarz`, overlap 1) with the GDSW,
AGDSW and GenEO coarse spaces at their default thresholds and caps, additive and hybrid
(the hybrid form reuses the additive preconditioner's coarse basis, so its set-up is the
coarse basis plus its own factorisations), and pyamg's smoothed aggregation (SA; ``B`` = the
rigid body modes for elasticity) and classical Ruge-Stuben AMG (RS) as peers.  BLAS runs
with ``--threads`` threads (default 1).  "Set-up" is the ``TwoLevelSchwarz`` (or pyamg
hierarchy) construction, without the decomposition; "total" is set-up + solve.

Box decompositions (``Decomposition.from_grid``) for the finite-difference problems, METIS
(``Decomposition.from_matrix``, ``block_size`` = space dimension) for elasticity.  The
subdomain sizes are chosen so that GenEO's local eigenproblems stay a few hundred to about a
thousand unknowns; every table says what it used.  The random coefficients are scaled with
the subdomains in the weak-scaling sections (log-normal correlation length ``0.8 H``,
``H = 1/P`` the box width; inclusions at a fixed density per cell), so every subdomain sees
the same kind of coefficient whatever ``N``.

Sections (``--sections``, run in this order):

``contrast2d``
    Floating channels (``high_contrast_channels(margin=1)``, one cell wide every 8 cells)
    and a log-normal field in 2D, 64 boxes of 32 x 32 points (``--quick``: 16), contrasts
    1, 1e2, 1e4, 1e6, 1e8: iterations and coarse dimensions of GDSW, AGDSW and GenEO.
``scaling2d``
    The same problems at contrast 1e6 (channels) and 1e4 / 1e8 (log-normal), boxes of
    16 x 16 points, ``N = 64, 256, 1024`` (``--quick``: 16, 64); SA and RS for reference.
``3d``
    Random bar inclusions (contrast 1e6) and a log-normal field (contrast 1e8) in 3D, boxes
    of 6 x 6 x 6 points, ``N = 64, 216, 512`` (``--quick``: 27, 64); SA and RS.
``elasticity``
    P1 plane-strain elasticity on an unstructured mesh with 60 stiff disks (about 20% of
    the area), clamped at ``x = 0``, about 51k unknowns, contrasts 1, 1e3, 1e6, METIS into
    128 parts; P1 elasticity on a tetrahedral box mesh with 20 stiff balls (contrast 1e6),
    64 parts.  GenEO gets the finite-element Neumann matrices of the subdomains
    (``fem_elasticity_neumann(mesh, d, E=E)``; their assembly time is added to its set-up
    and total), all Schwarz methods the rigid body modes.  AGDSW runs twice: with its
    algebraic Neumann matrices (it warns: ``A`` is not diagonally dominant, they are then
    only approximations) and with the same finite-element ones ("AGDSW FE-Neumann").  Where
    GenEO's default cap on eigenvectors per subdomain binds, GenEO runs again with
    ``max_per_subdomain=200`` (full mode only).
``cost``
    On the high-contrast problems above (2D channels 1e6 and log-normal 1e8 on 64 boxes of
    32 x 32, 3D inclusions 1e6 on 216 boxes of 6^3, 2D elasticity 1e6): set-up and time to
    solution of every method in ``--rounds`` interleaved rounds (the order rotates from
    round to round; elasticity one round), ratios per round and their medians.  On
    homogeneous problems (2D and 3D Poisson, 2D and 3D elasticity with ``E = 1``): GDSW
    against AGDSW iterations and coarse dimensions.

Each section prints markdown tables and one ``PASS`` / ``MISS`` line per target (all of them
again at the end) and the whole measurement goes to ``--json`` (default
``results/adaptive.json``, ``results/adaptive_quick.json`` with ``--quick``), rewritten after
every section.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import math
import os
import sys
import time
import warnings
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
)

RTOL = 1e-8
SECTIONS = ("contrast2d", "scaling2d", "3d", "elasticity", "cost")
CONTRASTS = (1.0, 1e2, 1e4, 1e6, 1e8)
#: Cells per inclusion of ``random_inclusions`` (bars of 3 x 3 x 8) and inclusions per cell:
#: 200 bars in 48^3 cells (about 12% of the volume before overlaps).
INCLUSION_DENSITY = 200 / 48**3
#: Log-normal correlation length in units of the box width.
CORRELATION_PER_BOX = 0.8


#: Printed under the first table of every section.
LEGEND = ("Iterations: `>k` CG stopped at the iteration limit, `*` the true relative residual "
          f"|b - A x| / |b| is above {100 * RTOL:g} (CG's own test on the preconditioned "
          "residual was met), `failed` the method raised (see the JSON).")


# -- small helpers -----------------------------------------------------------------------------
def _log(msg: str) -> None:
    print(msg, flush=True)


def _rhs(n: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(n)


def _clean(v: Any) -> Any:
    """JSON-friendly copy: numpy scalars to Python, arrays summarised, inf/nan to None."""
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, np.ndarray):
        if v.size == 0:
            return []
        if v.dtype.kind in "biuf":
            return {"max": _clean(v.max()), "mean": _clean(float(v.mean())), "size": v.size}
        return None
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def table(headers: list[str], rows: list[list[Any]]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def _sci(x: float) -> str:
    return "1" if x == 1 else f"1e{round(math.log10(x))}"


def _median(xs) -> float:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.median(xs)) if xs else math.nan


def cg_solve(A, b, M, maxiter: int) -> dict[str, Any]:
    """CG to ``RTOL`` from zero: iterations, seconds, info and the true relative residual."""
    count = [0]

    def callback(_xk):
        count[0] += 1

    start = time.perf_counter()
    x, info = spla.cg(A, b, rtol=RTOL, maxiter=maxiter, M=M, callback=callback)
    seconds = time.perf_counter() - start
    relres = float(np.linalg.norm(b - A @ x) / np.linalg.norm(b))
    # converged: CG's own test (preconditioned recurrence residual) was met; at contrast 1e8
    # the true residual can stay above rtol (``relres``, marked in the tables)
    return {"iterations": count[0], "solve_s": seconds, "info": int(info), "relres": relres,
            "converged": bool(info == 0)}


def _its(r: dict | None) -> str:
    """Iteration cell: the count, ``>maxiter`` when CG stopped there, ``-`` when absent,
    ``*`` when the true relative residual is above ``100 rtol``."""
    if not r:
        return "-"
    if "error" in r:
        return "failed"
    s = str(r["iterations"]) if r["converged"] else f">{r['iterations']}"
    return s + ("*" if r["relres"] > 100 * RTOL else "")


def _its_n0(r: dict | None) -> str:
    if not r or "error" in r:
        return _its(r)
    return f"{_its(r)} ({r['coarse_dim']})"


def _num(r: dict | None, key: str):
    if not r or "error" in r or key not in r:
        return "-"
    return r[key]


# -- the methods -------------------------------------------------------------------------------
def _stats(M) -> dict[str, Any]:
    keep = ("coarse_dim", "null_space_functions", "eigen_functions", "dropped_dependent",
            "capped", "eigenproblems", "largest_eigenproblem", "eigen_seconds",
            "extension_seconds", "seconds", "k0", "k1", "bound", "kept_per_subdomain",
            "kept_per_component")
    return _clean({k: v for k, v in M.coarse_stats.items() if k in keep})


def schwarz_run(A, b, d, basis: str, maxiter: int, *, null_space=None, options=None,
                hybrid: bool = False, extra_setup: float = 0.0) -> dict[str, Any]:
    """Additive two-level Schwarz with ``basis`` (and its hybrid form with the same coarse basis).

    ``extra_setup`` (seconds, e.g. the assembly of Neumann matrices) is added to the set-up
    and total times (``schwarz_setup_s`` is the ``TwoLevelSchwarz`` set-up alone).
    """
    import ddops
    from ddops.precond.options import coarse_options_from_dict

    gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            M = ddops.TwoLevelSchwarz(A, d, options=ddops.SchwarzOptions(
                coarse=basis, null_space=null_space,
                **coarse_options_from_dict(basis, options or {})))
        except Exception as exc:  # noqa: BLE001 - a failing method is a result here
            return {"error": f"{type(exc).__name__}: {exc}"}
    out = {"setup_s": float(M.setup_seconds) + extra_setup,
           "schwarz_setup_s": float(M.setup_seconds), "extra_setup_s": extra_setup,
           "coarse_basis_s": float(M.coarse_basis_seconds), "coarse_dim": int(M.coarse_dim),
           "stats": _stats(M),
           "warnings": sorted({str(w.message).split(";")[0][:160] for w in caught})}
    out.update(cg_solve(A, b, M, maxiter))
    out["total_s"] = out["setup_s"] + out["solve_s"]
    if hybrid:
        Phi, basis_s = M.coarse_matrix, out["coarse_basis_s"]
        del M
        gc.collect()
        H = ddops.TwoLevelSchwarz(A, d, variant="hybrid", coarse_basis=Phi)
        h = cg_solve(A, b, H, maxiter)
        h.update(setup_s=basis_s + float(H.setup_seconds) + extra_setup,
                 coarse_dim=out["coarse_dim"])
        h["total_s"] = h["setup_s"] + h["solve_s"]
        out["hybrid"] = h
    return out


@contextlib.contextmanager
def _captured_stdout(lines: list[str]):
    """Capture what is written to file descriptor 1 (pyamg's compiled core prints there) into
    ``lines``; plain ``sys.stdout`` where the descriptor cannot be redirected."""
    import tempfile

    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            yield
        lines += buf.getvalue().splitlines()
        return
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            with contextlib.redirect_stdout(io.StringIO()) as buf:
                yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            lines += tmp.read().decode(errors="replace").splitlines()
            lines += buf.getvalue().splitlines()


def amg_run(A, b, kind: str, maxiter: int, B=None) -> dict[str, Any]:
    """pyamg smoothed aggregation (``"sa"``, near-null space ``B``) or Ruge-Stuben (``"rs"``)
    as a V-cycle preconditioner; ``{"error": ...}`` when pyamg is missing or fails."""
    try:
        import pyamg
    except ImportError:
        return {"error": "pyamg not installed"}
    gc.collect()
    printed: list[str] = []  # pyamg prints some of its complaints
    try:
        with warnings.catch_warnings(), _captured_stdout(printed):
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            if kind == "sa":
                ml = pyamg.smoothed_aggregation_solver(A, B=B)
            else:
                ml = pyamg.ruge_stuben_solver(A)
            setup = time.perf_counter() - start
            out = cg_solve(A, b, ml.aspreconditioner(cycle="V"), maxiter)
    except Exception as exc:  # noqa: BLE001 - a failing peer is a result here
        return {"error": f"{type(exc).__name__}: {exc}", "printed": sorted(set(printed))}
    out.update(setup_s=setup, total_s=setup + out["solve_s"], levels=len(ml.levels),
               operator_complexity=float(ml.operator_complexity()), coarse_dim=0,
               printed=sorted(set(printed)))
    return out


# -- problems ----------------------------------------------------------------------------------
def scalar_problem(kind: str, dim: int, P: int, box: int, contrast: float):
    """Finite-difference diffusion on ``P^dim`` boxes of about ``box^dim`` points.

    ``n = box P - 1`` points per direction, so the ``n + 1 = box P`` cells split evenly.
    Returns ``A``, the decomposition and a description.
    """
    import ddops
    from ddops.problems import (
        diffusion_2d,
        diffusion_3d,
        high_contrast_channels,
        lognormal_field,
        random_inclusions,
    )

    n = box * P - 1
    cells = n + 1
    if kind == "channels":
        c = high_contrast_channels(n, contrast, dim=dim, period=8, width=1, margin=1)
    elif kind == "lognormal":
        c = lognormal_field(n, dim=dim, correlation_length=CORRELATION_PER_BOX / P,
                            contrast=contrast, seed=0)
    elif kind == "inclusions":
        count = max(1, round(INCLUSION_DENSITY * cells**dim))
        c = random_inclusions(n, dim=dim, count=count, contrast=contrast, seed=0)
    elif kind == "poisson":
        c = np.ones((cells,) * dim)
    else:  # pragma: no cover - internal
        raise ValueError(kind)
    A = (diffusion_2d if dim == 2 else diffusion_3d)(c)
    d = ddops.Decomposition.from_grid((n,) * dim, (P,) * dim, overlap=1)
    return A, d, {"n_per_dir": n, "unknowns": A.shape[0], "N": P**dim, "box": box}


def elasticity_problem(dim: int, size: int, N: int, contrast: float, count: int,
                       radius: float):
    """P1 elasticity with ``count`` stiff disks / balls of ``radius``; METIS into ``N`` parts.

    2D: ``unit_square_mesh(size, kind="unstructured")``; 3D: ``box_mesh(size)``.  Returns
    ``A``, the decomposition, the rigid body modes, the Neumann matrices of the subdomains
    and a description (with the seconds that the assembly of the Neumann matrices costs).
    """
    import ddops
    from ddops.problems import (
        box_mesh,
        element_centroids,
        fem_elasticity_2d,
        fem_elasticity_3d,
        fem_elasticity_neumann,
        rigid_body_modes,
        stiff_inclusions,
        unit_square_mesh,
    )

    mesh = unit_square_mesh(size, kind="unstructured", seed=0) if dim == 2 else box_mesh(size)
    assemble = fem_elasticity_2d if dim == 2 else fem_elasticity_3d
    E = stiff_inclusions(element_centroids(mesh), count=count, radius=radius,
                         contrast=contrast, seed=0)
    A, X = assemble(mesh=mesh, E=E)
    d = ddops.Decomposition.from_matrix(A, N, overlap=1, block_size=dim)
    start = time.perf_counter()
    Ns = fem_elasticity_neumann(mesh, d, E=E)
    t_neumann = time.perf_counter() - start
    stiff = float(np.mean(E > 1.0)) if contrast != 1.0 else 0.0
    info = {"unknowns": A.shape[0], "N": N, "mesh_size": size, "stiff_fraction": stiff,
            "subdomain_mean": float(d.sizes.mean()), "subdomain_max": int(d.max_size),
            "neumann_s": t_neumann}
    return A, d, rigid_body_modes(X), Ns, info


# -- running one problem -----------------------------------------------------------------------
def run_all(A, d, methods: tuple[str, ...], maxiter: int, *, null_space=None, neumann=None,
            neumann_s: float = 0.0, amg_B=None, tag: str = "") -> dict[str, Any]:
    """Every method of ``methods`` on one problem: ``gdsw``, ``agdsw``, ``geneo`` (each with
    its hybrid form, except GDSW), ``agdsw_fe`` (AGDSW with the given Neumann matrices),
    ``geneo_cap`` (GenEO with ``max_per_subdomain=200``), ``sa``, ``rs``."""
    b = _rhs(A.shape[0])
    out: dict[str, Any] = {}
    for m in methods:
        if m in ("gdsw", "agdsw", "geneo"):
            opts = {"neumann": neumann} if (m == "geneo" and neumann is not None) else None
            out[m] = schwarz_run(A, b, d, m, maxiter, null_space=null_space, options=opts,
                                 hybrid=m != "gdsw",
                                 extra_setup=neumann_s if opts else 0.0)
        elif m == "agdsw_fe":
            out[m] = schwarz_run(A, b, d, "agdsw", maxiter, null_space=null_space,
                                 options={"neumann": neumann}, hybrid=True,
                                 extra_setup=neumann_s)
        elif m == "geneo_cap":
            opts = {"max_per_subdomain": 200}
            if neumann is not None:
                opts["neumann"] = neumann
            out[m] = schwarz_run(A, b, d, "geneo", maxiter, null_space=null_space,
                                 options=opts, hybrid=True,
                                 extra_setup=neumann_s if neumann is not None else 0.0)
        else:
            out[m] = amg_run(A, b, m, maxiter, B=amg_B)
    _log(f"  {tag}: " + ", ".join(
        f"{m} {_its(r)}" + (f"/{_its(r['hybrid'])}h" if "hybrid" in r else "")
        + (f" (n0 {r['coarse_dim']})" if r.get("coarse_dim") else "")
        for m, r in out.items()))
    return out


def _hyb(r: dict | None) -> dict | None:
    return r.get("hybrid") if r and "error" not in r else None


def _failed_ok(r: dict | None) -> bool:
    return bool(r) and "error" not in r


# -- targets -----------------------------------------------------------------------------------
def _target(section: str, label: str, ok: bool | None, detail: str) -> dict[str, Any]:
    """A target line; ``ok=None`` is a number reported without a target (``INFO``)."""
    return {"section": section, "label": label, "ok": None if ok is None else bool(ok),
            "detail": detail}


def _target_lines(targets: list[dict]) -> str:
    def word(ok):
        return "INFO" if ok is None else ("PASS" if ok else "MISS")

    return "\n".join(f"{word(t['ok'])} [{t['section']}] {t['label']}: {t['detail']}"
                     for t in targets)


def _count(r: dict | None) -> float:
    """Iterations as a number for the targets (inf when CG did not converge or failed)."""
    if not r or "error" in r or not r["converged"]:
        return math.inf
    return float(r["iterations"])


def _iteration_targets(section: str, label: str, series: list[dict], what: str,
                       limit_add: float, limit_hyb: float | None,
                       spread: float | None) -> list[dict]:
    """Targets on a series of results (over contrasts or ``N``) of one adaptive method."""
    add = [_count(r) for r in series]
    hyb = [_count(_hyb(r)) for r in series]
    t = [_target(section, f"{label}: {what} additive <= {limit_add:g}", max(add) <= limit_add,
                 f"max {max(add):g} ({', '.join(f'{x:g}' for x in add)})")]
    if limit_hyb is not None:
        t.append(_target(section, f"{label}: {what} hybrid <= {limit_hyb:g}",
                         max(hyb) <= limit_hyb,
                         f"max {max(hyb):g} ({', '.join(f'{x:g}' for x in hyb)})"))
    if spread is not None:
        for name, xs in (("additive", add), ("hybrid", hyb)):
            ratio = max(xs) / min(xs) if min(xs) > 0 else math.inf
            t.append(_target(section, f"{label}: {what} {name} max/min <= {spread:g}",
                             ratio <= spread, f"{ratio:.2f}"))
    return t


def _dim_target(section: str, label: str, series: list[dict], base: list[dict],
                limit: float) -> dict:
    ratios = [r["coarse_dim"] / g["coarse_dim"] for r, g in zip(series, base, strict=True)
              if _failed_ok(r) and _failed_ok(g)]
    worst = max(ratios) if ratios else math.inf
    return _target(section, f"{label}: AGDSW coarse dim <= {limit:g} x GDSW's", worst <= limit,
                   f"max ratio {worst:.2f} ("
                   + ", ".join(f"{r['coarse_dim']}/{g['coarse_dim']}" for r, g in
                               zip(series, base, strict=True)
                               if _failed_ok(r) and _failed_ok(g)) + ")")


# -- sections ----------------------------------------------------------------------------------
SCHWARZ = ("gdsw", "agdsw", "geneo")


def _schwarz_rows(rs: list[dict], first: list[str], with_amg: bool) -> list[list[Any]]:
    rows = []
    for r in rs:
        m = r["methods"]
        row = [r[k] for k in first]
        row += [_its_n0(m["gdsw"]), _its_n0(m["agdsw"]), _its(_hyb(m["agdsw"])),
                _its_n0(m["geneo"]), _its(_hyb(m["geneo"]))]
        if with_amg:
            row += [_its(m.get("sa")), _its(m.get("rs"))]
        row += [_num(m["gdsw"], "setup_s"), _num(m["agdsw"], "setup_s"),
                _num(m["geneo"], "setup_s")]
        rows.append(row)
    return rows


SCHWARZ_HEADERS = ["GDSW (n0)", "AGDSW (n0)", "AGDSW hybrid", "GenEO (n0)", "GenEO hybrid"]
SETUP_HEADERS = ["set-up s GDSW", "AGDSW", "GenEO"]


def section_contrast2d(args) -> dict[str, Any]:
    P = 4 if args.quick else 8
    box = 32
    out = []
    for kind in ("channels", "lognormal"):
        for c in CONTRASTS:
            A, d, info = scalar_problem(kind, 2, P, box, c)
            info.update(problem=kind, contrast=c, contrast_s=_sci(c))
            info["methods"] = run_all(A, d, SCHWARZ, args.maxiter,
                                      tag=f"{kind} 2D contrast {_sci(c)}")
            out.append(info)
            del A, d
    rows = _schwarz_rows(out, ["problem", "contrast_s"], False)
    txt = (f"2D diffusion, {P * P} boxes of {box} x {box} points ({out[0]['unknowns']} "
           "unknowns), overlap 1; channels: one cell wide every 8 cells, floating (margin 1); "
           f"log-normal: correlation length {CORRELATION_PER_BOX / P:.3g}; CG iterations (coarse "
           "dimension n0):\n\n"
           + table(["problem", "contrast"] + SCHWARZ_HEADERS + SETUP_HEADERS, rows))
    targets = []
    for kind in ("channels", "lognormal"):
        rs = [r for r in out if r["problem"] == kind]
        ag = [r["methods"]["agdsw"] for r in rs]
        targets += _iteration_targets("contrast2d", f"{kind} 2D", ag, "AGDSW over contrasts",
                                      45, 30, 1.3)
        targets.append(_dim_target("contrast2d", f"{kind} 2D", ag,
                                   [r["methods"]["gdsw"] for r in rs], 3.0))
    return {"results": out, "text": txt, "targets": targets}


def section_scaling2d(args) -> dict[str, Any]:
    parts = (4, 8) if args.quick else (8, 16, 32)
    box = 16
    cases = (("channels", 1e6), ("lognormal", 1e4), ("lognormal", 1e8))
    out = []
    for kind, c in cases:
        for P in parts:
            A, d, info = scalar_problem(kind, 2, P, box, c)
            info.update(problem=kind, contrast=c, contrast_s=_sci(c))
            info["methods"] = run_all(A, d, SCHWARZ + ("sa", "rs"), args.maxiter,
                                      tag=f"{kind} 2D {_sci(c)} N={P * P}")
            out.append(info)
            del A, d
    rows = _schwarz_rows(out, ["problem", "contrast_s", "N", "unknowns"], True)
    txt = (f"2D weak scaling, boxes of {box} x {box} points (subdomains of about "
           f"{(box + 2) ** 2} unknowns with the overlap), overlap 1; log-normal correlation "
           f"length {CORRELATION_PER_BOX:g} H; CG iterations (n0):\n\n"
           + table(["problem", "contrast", "N", "unknowns"] + SCHWARZ_HEADERS
                   + ["pyamg SA", "pyamg RS"] + SETUP_HEADERS, rows))
    targets = []
    for kind, c in cases:
        rs = [r for r in out if r["problem"] == kind and r["contrast"] == c]
        ag = [r["methods"]["agdsw"] for r in rs]
        label = f"{kind} 2D {_sci(c)}"
        targets += _iteration_targets("scaling2d", label, ag, "AGDSW over N", 45, 30, 1.3)
        targets.append(_dim_target("scaling2d", label, ag,
                                   [r["methods"]["gdsw"] for r in rs], 3.0))
    return {"results": out, "text": txt, "targets": targets}


def section_3d(args) -> dict[str, Any]:
    parts = (3, 4) if args.quick else (4, 6, 8)
    box = 6
    cases = (("inclusions", 1e6), ("lognormal", 1e8))
    out = []
    for kind, c in cases:
        for P in parts:
            A, d, info = scalar_problem(kind, 3, P, box, c)
            info.update(problem=kind, contrast=c, contrast_s=_sci(c))
            info["methods"] = run_all(A, d, SCHWARZ + ("sa", "rs"), args.maxiter,
                                      tag=f"{kind} 3D {_sci(c)} N={P**3}")
            out.append(info)
            del A, d
    rows = _schwarz_rows(out, ["problem", "contrast_s", "N", "unknowns"], True)
    txt = (f"3D weak scaling, boxes of {box}^3 points (subdomains of about {(box + 2) ** 3} "
           "unknowns with the overlap), overlap 1; inclusions: random bars of 3 x 3 x 8 cells, "
           f"{INCLUSION_DENSITY * 48**3:.0f} per 48^3 cells (about 12% of the volume); "
           f"log-normal correlation length {CORRELATION_PER_BOX:g} H; CG iterations (n0):\n\n"
           + table(["problem", "contrast", "N", "unknowns"] + SCHWARZ_HEADERS
                   + ["pyamg SA", "pyamg RS"] + SETUP_HEADERS, rows))
    targets = []
    for kind, c in cases:
        rs = [r for r in out if r["problem"] == kind and r["contrast"] == c]
        for m, name in (("agdsw", "AGDSW"), ("geneo", "GenEO")):
            targets += _iteration_targets("3d", f"{kind} 3D {_sci(c)}",
                                          [r["methods"][m] for r in rs], f"{name} over N", 50,
                                          None, None)
    return {"results": out, "text": txt, "targets": targets}


def _elasticity_cases(args):
    """(label, dim, mesh size, parts, contrasts, inclusions, radius) of the elasticity runs."""
    if args.quick:
        return (("2D", 2, 63, 32, (1.0, 1e6), 60, 0.035), ("3D", 3, 9, 16, (1e6,), 20, 0.15))
    return (("2D", 2, 158, 128, (1.0, 1e3, 1e6), 60, 0.035),
            ("3D", 3, 17, 64, (1e6,), 20, 0.15))


METHOD_LABELS = {"gdsw": "GDSW", "agdsw": "AGDSW", "agdsw_fe": "AGDSW FE-Neumann",
                 "geneo": "GenEO",
                 "geneo_cap": "GenEO max_per_subdomain=200", "sa": "pyamg SA",
                 "rs": "pyamg RS"}


def _method_rows(r: dict, first: list[Any], reference: str = "geneo") -> list[list[Any]]:
    """One row per method and variant: iterations, set-up, solve, total, total / reference's."""
    rows = []
    ref = r["methods"].get(reference)
    ref_total = ref["total_s"] if _failed_ok(ref) else math.nan
    for m, res in r["methods"].items():
        variants = [("", res)]
        if _hyb(res):
            variants.append((" hybrid", res["hybrid"]))
        for suffix, v in variants:
            if not _failed_ok(v):
                rows.append(first + [METHOD_LABELS[m] + suffix, "-", "failed", "-", "-", "-",
                                     "-"])
                continue
            rows.append(first + [METHOD_LABELS[m] + suffix, v.get("coarse_dim") or "-",
                                 _its(v), v["setup_s"], v["solve_s"], v["total_s"],
                                 v["total_s"] / ref_total])
    return rows


def section_elasticity(args) -> dict[str, Any]:
    out = []
    for label, dim, size, N, contrasts, count, radius in _elasticity_cases(args):
        for c in contrasts:
            A, d, Z, Ns, info = elasticity_problem(dim, size, N, c, count, radius)
            info.update(problem=label, dim=dim, contrast=c, contrast_s=_sci(c), inclusions=count,
                        radius=radius)
            methods = ("gdsw", "agdsw", "agdsw_fe", "geneo", "sa", "rs")
            info["methods"] = run_all(A, d, methods, args.maxiter, null_space=Z, neumann=Ns,
                                      neumann_s=info["neumann_s"], amg_B=Z,
                                      tag=f"elasticity {label} {_sci(c)}")
            g = info["methods"]["geneo"]
            if (not args.quick and _failed_ok(g) and g["stats"].get("capped")):
                # the default cap bit: the same run without it shows what the cap costs
                info["methods"].update(run_all(A, d, ("geneo_cap",), args.maxiter,
                                               null_space=Z, neumann=Ns,
                                               neumann_s=info["neumann_s"],
                                               tag=f"elasticity {label} {_sci(c)} cap 200"))
            out.append(info)
            if label == "2D" and c == 1e6:
                args.elasticity_2d_1e6 = info["methods"]  # the cost section's elasticity round
            del A, d, Z, Ns
    desc = []
    for r in out:
        if r["contrast"] == max(x["contrast"] for x in out if x["problem"] == r["problem"]):
            shape = "disks" if r["dim"] == 2 else "balls"
            mesh = (f"unstructured unit_square_mesh({r['mesh_size']})" if r["dim"] == 2 else
                    f"box_mesh({r['mesh_size']})")
            desc.append(f"{r['problem']}: {mesh}, {r['unknowns']} unknowns, {r['inclusions']} "
                        f"stiff {shape} of radius {r['radius']:g} ({100 * r['stiff_fraction']:.0f}%"
                        f" of the elements), METIS into {r['N']} parts (block_size={r['dim']}, "
                        f"{r['subdomain_mean']:.0f} unknowns per subdomain on average, at most "
                        f"{r['subdomain_max']}); Neumann matrices: {r['neumann_s']:.2f} s extra "
                        "assembly (in GenEO's set-up and total)")
    notes = sorted({f"{r['problem']} {r['contrast_s']} {METHOD_LABELS[m]}: {w}"
                    for r in out for m, res in r["methods"].items()
                    for w in ((res.get("warnings") or []) + (res.get("printed") or [])
                              + ([res["error"]] if "error" in res else []))})
    rows = []
    for r in out:
        rows += _method_rows(r, [r["problem"], r["contrast_s"]])
    txt = ("Linear elasticity (P1, nu = 0.3, clamped at x = 0, E = 1 outside the inclusions), "
           "overlap 1, rigid body modes in every coarse space and as pyamg SA's B:\n\n"
           + "\n".join("- " + x for x in desc) + "\n\n"
           + table(["problem", "contrast", "method", "n0", "iterations", "set-up s", "solve s",
                    "total s", "total / GenEO's"], rows)
           + ("\n\nWarnings, printed messages and errors:\n" + "\n".join("- " + n for n in notes)
              if notes else ""))
    targets = []
    for r in out:
        lab = f"{r['problem']} elasticity {r['contrast_s']}"
        m = r["methods"]
        for key, name in (("agdsw", "AGDSW"), ("agdsw_fe", "AGDSW FE-Neumann"),
                          ("geneo", "GenEO")):
            it = _count(m[key])
            targets.append(_target("elasticity", f"{lab}: {name} additive <= 50", it <= 50,
                                   f"{it:g} (hybrid {_count(_hyb(m[key])):g})"))
        sa = m.get("sa")
        best = _best_adaptive(m)
        if _failed_ok(sa) and best:
            name, v = best
            ratio = sa["total_s"] / v["total_s"]
            targets.append(_target(
                "elasticity", f"{lab}: GenEO or AGDSW faster to solution than pyamg SA"
                + (" (no target at contrast 1)" if r["contrast"] == 1 else ""),
                None if r["contrast"] == 1 else ratio > 1.0 and v["converged"],
                f"best {name} {v['total_s']:.2f} s vs SA {sa['total_s']:.2f} s "
                f"({_its(sa)} iterations): SA / best = {ratio:.2f}"))
    return {"results": out, "text": txt, "targets": targets}


def _best_adaptive(m: dict) -> tuple[str, dict] | None:
    """The converged AGDSW / GenEO variant (any Neumann matrices, cap) with the smallest
    total time."""
    cands = []
    for key in ("agdsw", "agdsw_fe", "geneo", "geneo_cap"):
        r = m.get(key)
        if not _failed_ok(r):
            continue
        for suffix, v in (("", r), (" hybrid", _hyb(r))):
            if v and v["converged"]:
                cands.append((METHOD_LABELS[key] + suffix, v))
    return min(cands, key=lambda x: x[1]["total_s"]) if cands else None


# -- cost: interleaved rounds ------------------------------------------------------------------
def _cost_problems(args):
    """(label, builder) of the high-contrast problems of the cost section."""
    P2, P3 = (4, 3) if args.quick else (8, 6)
    el = _elasticity_cases(args)[0]

    def scalar(kind, dim, P, box, c):
        def build():
            A, d, info = scalar_problem(kind, dim, P, box, c)
            return A, d, {}, info
        return build

    def elasticity():
        _, dim, size, N, _, count, radius = el
        A, d, Z, Ns, info = elasticity_problem(dim, size, N, 1e6, count, radius)
        return A, d, {"null_space": Z, "neumann": Ns, "neumann_s": info["neumann_s"],
                      "amg_B": Z}, info

    return (
        ("channels 2D 1e6", scalar("channels", 2, P2, 32, 1e6), False),
        ("lognormal 2D 1e8", scalar("lognormal", 2, P2, 32, 1e8), False),
        ("inclusions 3D 1e6", scalar("inclusions", 3, P3, 6, 1e6), False),
        ("elasticity 2D 1e6", elasticity, True),
    )


def _homogeneous_problems(args):
    P2, P3 = (4, 3) if args.quick else (8, 6)
    el2, el3 = _elasticity_cases(args)

    def scalar(dim, P, box):
        def build():
            A, d, info = scalar_problem("poisson", dim, P, box, 1.0)
            return A, d, {}, info
        return build

    def elasticity(case):
        def build():
            _, dim, size, N, _, count, radius = case
            A, d, Z, Ns, info = elasticity_problem(dim, size, N, 1.0, count, radius)
            return A, d, {"null_space": Z, "neumann": Ns, "neumann_s": info["neumann_s"]}, info
        return build

    return (("Poisson 2D", scalar(2, P2, 32), True), ("Poisson 3D", scalar(3, P3, 6), True),
            ("elasticity 2D", elasticity(el2), False),
            ("elasticity 3D", elasticity(el3), False))


def section_cost(args) -> dict[str, Any]:
    rounds = max(1, args.rounds)
    methods = ("gdsw", "agdsw", "geneo", "sa", "rs")
    out = []
    for label, build, expensive in _cost_problems(args):
        if expensive:
            methods = ("gdsw", "agdsw", "agdsw_fe", "geneo", "sa", "rs")
        kept = getattr(args, "elasticity_2d_1e6", None) if expensive else None
        if kept is not None:  # measured by the elasticity section of this run: not again
            out.append({"problem": label, "rounds": 1, "from_section": "elasticity",
                        "runs": [{m: kept[m] for m in methods if m in kept}]})
            _log(f"  cost {label}: the elasticity section's measurement")
            continue
        A, d, kw, info = build()
        n_rounds = 1 if expensive else rounds
        runs = []
        for k in range(n_rounds):
            order = methods[k % len(methods):] + methods[:k % len(methods)]
            if expensive:
                order = tuple(m for m in order if m != "rs")  # RS: see the elasticity section
            res = run_all(A, d, order, args.maxiter, null_space=kw.get("null_space"),
                          neumann=kw.get("neumann"), neumann_s=kw.get("neumann_s", 0.0),
                          amg_B=kw.get("amg_B"), tag=f"cost {label} round {k + 1}")
            runs.append({m: res[m] for m in methods if m in res})
        info.update(problem=label, rounds=n_rounds, runs=runs)
        out.append(info)
        del A, d, kw
    rows, ratio_rows, targets = [], [], []
    adaptive = (("agdsw", ""), ("agdsw", "hybrid"), ("agdsw_fe", ""), ("agdsw_fe", "hybrid"),
                ("geneo", ""), ("geneo", "hybrid"))
    variants = (("gdsw", ""),) + adaptive + (("sa", ""), ("rs", ""))

    def pick(run, m, v):
        r = run.get(m)
        if not _failed_ok(r):
            return None
        return r.get("hybrid") if v else r

    def name(m, v):
        return {"sa": "SA", "rs": "RS"}.get(m, METHOD_LABELS[m]) + (f" {v}" if v else "")

    def ratios(r, num, den, key):
        return [pick(run, *num)[key] / pick(run, *den)[key] for run in r["runs"]
                if pick(run, *num) and pick(run, *den)]

    for r in out:
        conv = {}
        for m, v in variants:
            vals = [x for x in (pick(run, m, v) for run in r["runs"]) if x]
            if not vals:
                continue
            conv[(m, v)] = all(x["converged"] for x in vals)
            rows.append([r["problem"], name(m, v), vals[0].get("coarse_dim") or "-",
                         _its(vals[0])] + [_median([x[k] for x in vals])
                                           for k in ("setup_s", "solve_s", "total_s")])
        r["ratios"] = {}
        pairs = [(("agdsw", ""), ("gdsw", ""), "setup_s"),
                 (("agdsw_fe", ""), ("gdsw", ""), "setup_s"),
                 (("geneo", ""), ("gdsw", ""), "setup_s")]
        pairs += [(peer, a, "total_s") for peer in (("gdsw", ""), ("sa", ""), ("rs", ""))
                  for a in adaptive]
        for num, den, key in pairs:
            xs = ratios(r, num, den, key)
            if not xs:
                continue
            what = f"{'set-up' if key == 'setup_s' else 'total'} {name(*num)} / {name(*den)}"
            r["ratios"][what] = {"median": _median(xs), "rounds": xs}
            ratio_rows.append([r["problem"], what, _median(xs),
                               " ".join(f"{x:.2f}" for x in xs)])
        lab = r["problem"]
        s = r["ratios"].get("set-up AGDSW / GDSW", {}).get("median", math.nan)
        targets.append(_target("cost", f"{lab}: AGDSW set-up <= 3 x GDSW's", s <= 3,
                               f"{s:.2f}x (median of {r['rounds']} rounds)"))
        for peer in (("gdsw", ""), ("sa", ""), ("rs", "")):
            parts, best = [], -math.inf
            for a in adaptive:
                x = r["ratios"].get(f"total {name(*peer)} / {name(*a)}", {}).get("median")
                if x is None:
                    continue
                parts.append(f"{name(*a)} {x:.2f}x" + ("" if conv[a] else " (no conv.)"))
                if conv[a]:
                    best = max(best, x)
            if not parts:
                continue
            if peer[0] == "rs":  # no target: the honest ratio to classical AMG
                targets.append(_target("cost", f"{lab}: time to solution RS / adaptive "
                                       "(> 1: ddops faster)", None, ", ".join(parts)))
            else:
                targets.append(_target("cost", f"{lab}: AGDSW or GenEO >= 5x faster to "
                                       f"solution than {name(*peer)}", best >= 5,
                                       ", ".join(parts)))
    # homogeneous problems
    hom = []
    for label, build, scalar in _homogeneous_problems(args):
        A, d, kw, info = build()
        res = run_all(A, d, SCHWARZ if scalar else SCHWARZ + ("agdsw_fe",), args.maxiter,
                      null_space=kw.get("null_space"),
                      neumann=kw.get("neumann"), neumann_s=kw.get("neumann_s", 0.0),
                      tag=f"homogeneous {label}")
        info.update(problem=label, scalar=scalar, methods=res)
        hom.append(info)
        del A, d, kw
    hrows = []
    for r in hom:
        g, a, e = (r["methods"][k] for k in SCHWARZ)
        dim_ratio = (a["coarse_dim"] / g["coarse_dim"] if _failed_ok(a) and _failed_ok(g)
                     else math.nan)
        f = r["methods"].get("agdsw_fe")
        hrows.append([r["problem"], r["N"], r["unknowns"], _its_n0(g), _its_n0(a),
                      _its(_hyb(a)), dim_ratio, _its_n0(f), _its(_hyb(f)), _its_n0(e),
                      _its(_hyb(e)), _num(g, "setup_s"), _num(a, "setup_s"),
                      _num(e, "setup_s")])
        if r["scalar"]:
            targets.append(_target("cost", f"homogeneous {r['problem']}: AGDSW coarse dim "
                                   "within 10% of GDSW's", dim_ratio <= 1.1,
                                   f"{a['coarse_dim']} vs {g['coarse_dim']} "
                                   f"({dim_ratio:.3f}x)"))
        targets.append(_target("cost", f"homogeneous {r['problem']}: AGDSW iterations not "
                               "worse than GDSW's", _count(a) <= _count(g),
                               f"{_count(a):g} vs {_count(g):g}"
                               + ("" if r["scalar"] else f", n0 {a['coarse_dim']} vs "
                                  f"{g['coarse_dim']} ({dim_ratio:.2f}x)")))
        if _failed_ok(f):
            targets.append(_target("cost", f"homogeneous {r['problem']}: AGDSW FE-Neumann "
                                   "iterations not worse than GDSW's (n0 for information)",
                                   _count(f) <= _count(g),
                                   f"{_count(f):g} vs {_count(g):g}, n0 {f['coarse_dim']} vs "
                                   f"{g['coarse_dim']} ({f['coarse_dim'] / g['coarse_dim']:.2f}x)"))
    txt = (f"Time to solution on the high-contrast problems (median of {rounds} interleaved "
           "rounds; elasticity one round: the elasticity section's when it ran, else without "
           "RS; 2D scalar: 32 x 32 boxes, 3D: 6^3 boxes; GenEO's set-up includes the Neumann "
           "assembly):\n\n"
           + table(["problem", "method", "n0", "iterations", "set-up s", "solve s", "total s"],
                   rows)
           + "\n\nRatios (median, and per round):\n\n"
           + table(["problem", "ratio", "median", "rounds"], ratio_rows)
           + "\n\nHomogeneous problems (coefficient 1 / E = 1; same decompositions as above):"
           "\n\n"
           + table(["problem", "N", "unknowns", "GDSW (n0)", "AGDSW (n0)", "AGDSW hybrid",
                    "n0 AGDSW / GDSW", "AGDSW FE-Neumann (n0)", "hybrid", "GenEO (n0)",
                    "GenEO hybrid", "set-up s GDSW", "AGDSW", "GenEO"], hrows))
    return {"results": out, "homogeneous": hom, "text": txt, "targets": targets}


# -- driver ------------------------------------------------------------------------------------
def _machine() -> str:
    import subprocess

    import ddops

    try:
        root = os.path.dirname(os.path.dirname(os.path.abspath(ddops.__file__)))
        head = subprocess.run(["git", "-C", root, "log", "-1", "--format=%h %cI"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "ddops"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        rev = f"{head}{' + uncommitted ddops changes' if dirty else ''}" if head else "?"
    except (OSError, subprocess.SubprocessError):
        rev = "?"
    return f"ddops at {rev}; " + machine_summary(pyamg=True, ddops=True, load=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=None,
                   help="sections to run, in the script's order (default: all)")
    add_quick_flag(p, "small sizes: a smoke run")
    add_json_flag(p, "where to write everything measured (rewritten after every section; "
                  "default results/adaptive.json, results/adaptive_quick.json with --quick)")
    p.add_argument("--rounds", type=int, default=None,
                   help="interleaved rounds of the cost section (default 3, --quick 2)")
    p.add_argument("--maxiter", type=int, default=2000, help="CG iteration limit (default 2000)")
    add_threads_flag(p, "BLAS threads (default 1)")
    p.add_argument("--profile", action="store_true",
                   help="after the sections: cProfile of the GDSW, AGDSW and GenEO set-ups on "
                   "the 2D channels (contrast 1e6)")
    return p


def _write_json(path: str, res: dict[str, Any]) -> None:
    from ddops.io import atomic_write_json

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    atomic_write_json(path, _clean(res))


def warm_up() -> None:
    """Every method once on a tiny problem, so no first call pays imports and caches."""
    A, d, _ = scalar_problem("channels", 2, 2, 8, 1e4)
    with contextlib.redirect_stdout(io.StringIO()):
        run_all(A, d, SCHWARZ + ("sa", "rs"), 200)


def profile_setup(args) -> str:
    """cProfile of the GDSW, AGDSW and GenEO set-ups on the 2D channels (contrast 1e6) and of
    the GDSW and AGDSW set-ups on the 3D inclusions (contrast 1e6) of the cost section."""
    import cProfile
    import pstats

    import ddops

    P2, P3 = (4, 3) if args.quick else (8, 6)
    cases = (("channels 2D 1e6", scalar_problem("channels", 2, P2, 32, 1e6)[:2],
              ("gdsw", "agdsw", "geneo"), f"{P2 * P2} boxes of 32 x 32"),
             ("inclusions 3D 1e6", scalar_problem("inclusions", 3, P3, 6, 1e6)[:2],
              ("gdsw", "agdsw"), f"{P3**3} boxes of 6^3"))
    text = []
    for label, (A, d), bases, boxes in cases:
        for basis in bases:
            gc.collect()
            prof = cProfile.Profile()
            prof.enable()
            M = ddops.TwoLevelSchwarz(A, d, coarse_basis=basis)
            prof.disable()
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(16)
            lines = [x for x in buf.getvalue().splitlines() if x.strip()]
            text.append(f"{basis.upper()} set-up on {label}, {boxes} ({M.setup_seconds:.2f} s, "
                        f"coarse basis {M.coarse_basis_seconds:.2f} s, local factors "
                        f"{M.local_setup_seconds:.2f} s, coarse factor "
                        f"{M.coarse_setup_seconds:.2f} s; stats {_stats(M)}), cumulative:\n"
                        + "\n".join(lines[3:]))
            del M
    return "\n\n".join(text)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads < 1 or args.maxiter < 1 or (args.rounds is not None and args.rounds < 1):
        print("error: --threads, --maxiter and --rounds must be >= 1", file=sys.stderr)
        return 2
    if args.rounds is None:
        args.rounds = 2 if args.quick else 3
    if args.json is None:
        args.json = "results/adaptive_quick.json" if args.quick else "results/adaptive.json"
    sections = [s for s in SECTIONS if s in (args.sections or SECTIONS)]
    from threadpoolctl import threadpool_limits

    machine = _machine()
    _log("machine: " + machine)
    from ddops.dd.adaptive import (
        AGDSW_THRESHOLD,
        GENEO_THRESHOLD,
        MAX_PER_COMPONENT,
        MAX_PER_SUBDOMAIN,
    )

    defaults = (f"AGDSW threshold {AGDSW_THRESHOLD:g}, max_per_component "
                f"{MAX_PER_COMPONENT}; GenEO threshold {GENEO_THRESHOLD:g}, "
                f"max_per_subdomain {MAX_PER_SUBDOMAIN}")
    _log(f"mode: {'quick' if args.quick else 'full'}; sections {' '.join(sections)}; CG rtol "
         f"{RTOL:g}, maxiter {args.maxiter}; BLAS threads {args.threads}; ddops defaults: "
         f"{defaults}")
    res: dict[str, Any] = {"machine": machine, "argv": sys.argv[1:], "quick": args.quick,
                           "rtol": RTOL, "maxiter": args.maxiter, "defaults": defaults}
    with threadpool_limits(args.threads):
        warm_up()
    all_targets: list[dict] = []
    for s in sections:
        _log(f"== {s}")
        start = time.perf_counter()
        with threadpool_limits(args.threads):
            res[s] = globals()[f"section_{s}"](args)
        res[s]["seconds"] = time.perf_counter() - start
        all_targets += res[s]["targets"]
        _log(res[s]["text"] + "\n\n" + LEGEND + "\n\n" + _target_lines(res[s]["targets"])
             + f"\n\n({s}: {res[s]['seconds']:.0f} s)\n")
        res["targets"] = all_targets
        _write_json(args.json, res)
    if args.profile:
        _log("== profile")
        with threadpool_limits(args.threads):
            res["profile"] = profile_setup(args)
        _log(res["profile"] + "\n")
        _write_json(args.json, res)
    _log("== targets")
    _log(_target_lines(all_targets))
    passed = sum(t["ok"] is True for t in all_targets)
    counted = sum(t["ok"] is not None for t in all_targets)
    load = os.getloadavg() if hasattr(os, "getloadavg") else ()
    _log(f"{passed} of {counted} PASS; load average at the end: "
         + " ".join(f"{x:.2f}" for x in load) + f"; JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
