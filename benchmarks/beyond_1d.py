"""Schwarz attention beyond 1D: speed, accuracy, weak scaling and memory on 2D/3D problems.

Sections (``--sections``, run in this order):

``speed``
    2D Poisson, 64 x 64 interior points, 16 boxes (4 x 4), GDSW coarse
    space, float64, batch 256: full training steps per second (``Trainer``:
    data, exact solutions, forward, backward, AdamW), the same step without
    data generation, and the data alone.  The 1D operator at ``n = 4096``
    (``N = 128``, the paper's settings) is timed in the same process in
    interleaved blocks, so the ratio is meaningful on a loaded machine.
    A cProfile of 20 steps and a split of one step into its parts follow.
``accuracy``
    The paper's comparison on the same problem for 2000 steps: Schwarz
    attention against the global low-rank models with its rank bound and its
    parameter count (``ddops compare --problem poisson2d``), per preset.
``scaling``
    Weak scaling at 32 x 32 points per subdomain: N = 4, 16, 64 (up to
    256 x 256), 2000 steps each (``ddops scaling --problem poisson2d``);
    wall time per size.
``memory``
    tracemalloc peak of building and training the 256 x 256 model (a few
    steps) against the batch arrays (F, U, prediction, gradient) plus the
    parameters.
``other``
    3D Poisson (16^3, 8 boxes) and high-contrast diffusion (64 x 64,
    contrast 1e6, 16 boxes) with the same comparison.
``ranks``
    On the 2D case: the Schwarz model alone for 500 steps with local ranks 4,
    16 and 32; the validation wMSE of classical operators with exact local
    solves (the Galerkin coarse part, additive and hybrid two-level GDSW);
    the singular values of the right-hand-side basis.
``steptime`` (not in the default run)
    Milliseconds per training step at the largest scaling size (256 x 256,
    64 boxes) with 256 and with 64 right-hand-side functions (5 steps after
    2 warm ones), and the projected time of 2000 steps.
``structure``
    What the Schwarz structure can reach at all, from dense matrices (small
    sizes): outside the union of the subdomain blocks only the coarse term
    ``Phi G0 Phi^T`` contributes, so every Schwarz attention operator on the
    decomposition has ``||A^-1 - M||_F >= min_G0 ||P_out (A^-1 - Phi G0
    Phi^T)||_F`` (least squares in ``G0`` by CG on its normal equations),
    against the best global rank-r error (Eckart-Young) at the ranks of the
    comparison; and the share of ``A^-1 - Phi S^-1 Phi^T`` (Galerkin coarse
    part removed) outside the blocks.

Every number is printed with the command-line equivalent; ``--json`` writes
them all.  BLAS threads: the Trainer's default (1) unless ``--blas-threads``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
import tracemalloc
from dataclasses import replace
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SECTIONS = ("speed", "accuracy", "scaling", "memory", "other", "structure", "ranks",
            "steptime")


def _config(problem: str = "poisson2d", preset: str = "improved", **changes: Any):
    from ddops.experiments.compare import PRESETS, ExperimentConfig

    if problem == "poisson1d":
        return ExperimentConfig(progress=False, **{**PRESETS[preset], **changes}).validated()
    return ExperimentConfig.for_problem(problem, progress=False,
                                        **{**PRESETS[preset], **changes}).validated()


def _trainer(c, blas_threads: int):
    """The Schwarz model's Trainer of a configuration (set-up outside the timings)."""
    from ddops.experiments.compare import build_models, build_problem
    from ddops.learning.training import Trainer, TrainingConfig

    prob = build_problem(c)
    op = build_models(replace(c, global_ranks=()), prob.decomposition, prob.A,
                      coarse=prob.coarse)["schwarz"]
    cfg = TrainingConfig(steps=10**9, batch_size=c.batch_size, lr=c.lr, loss=c.loss,
                         optimizer=c.optimizer, scheduler=c.scheduler, progress=False,
                         val_every=10**9, lr_scaling=c.lr_scaling, blas_threads=blas_threads)
    return Trainer(op, prob.sampler, cfg, train_seed=c.train_seed,
                   A=prob.A if c.lr_scaling == "problem" else None), prob


def speed(rounds: int, steps: int, blas_threads: int) -> dict[str, Any]:
    """Steps/s of the 2D model and of the 1D model at n = 4096, interleaved; parts; profile."""
    from threadpoolctl import threadpool_limits

    cases = {"2d_64x64_N16": _config("poisson2d", n=64, subdomains=16),
             "2d_64x64_N16_rhs_modes4": _config("poisson2d", n=64, subdomains=16, rhs_modes=4),
             "1d_n4096_N128": _config("poisson1d", n=4096, subdomains=128)}
    trainers = {}
    for name, c in cases.items():
        trainers[name] = _trainer(c, blas_threads)
        trainers[name][0].run(5)  # allocate and touch every buffer
    ms: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):
        for name, (t, _) in trainers.items():
            before, start = t.seconds["total"], t.step
            t.run(start + steps)
            ms[name].append(1e3 * (t.seconds["total"] - before) / (t.step - start))
    out: dict[str, Any] = {"blas_threads": blas_threads, "rounds": rounds,
                           "steps_per_round": steps}
    for name, (t, prob) in trainers.items():
        op = t.op
        with threadpool_limits(limits=blas_threads, user_api="blas"):
            parts = _parts(op, prob.sampler)
            parts["optimizer_and_rest"] = max(0.0, float(np.median(ms[name])) / 1e3
                                              - parts["data"] - parts["loss_and_gradient"])
        d = op.decomposition
        out[name] = {"median_ms": float(np.median(ms[name])), "all_ms": ms[name],
                     "steps_per_s": 1e3 / float(np.median(ms[name])),
                     "parts_ms": {k: 1e3 * v for k, v in parts.items()},
                     "unknowns": int(op.shape[0]), "subdomains": int(d.num_subdomains),
                     "padded_size": int(d.max_size), "width": int(op.width),
                     "coarse_dim": int(op.coarse_dim), "num_params": int(op.num_params),
                     "rhs_functions": int(prob.sampler.basis.shape[1])
                     if hasattr(prob.sampler, "basis") else
                     int(prob.sampler.inner.basis.shape[1])}
    out["ratio_2d_over_1d_time"] = (out["2d_64x64_N16"]["median_ms"]
                                    / out["1d_n4096_N128"]["median_ms"])
    t2 = trainers["2d_64x64_N16"][0]
    prof = cProfile.Profile()
    prof.enable()
    t2.run(t2.step + 20)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(10)
    out["profile_2d"] = buf.getvalue()
    return out


def _parts(op: Any, sampler: Any, B: int = 256) -> dict[str, float]:
    """Best-of-5 seconds of the data, the forward product and loss plus gradient."""
    rng = np.random.default_rng(0)
    F, U = sampler.sample(B, rng)
    return {"data": _best(lambda: sampler.sample(B, rng, out=(F, U))),
            "forward": _best(lambda: op.matmat(F)),
            "loss_and_gradient": _best(lambda: op.value_and_grad_flat(F, U, "wmse"))}


def _best(fn, repeat: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(min(times))


def accuracy(presets: list[str], steps: int, prefix: str, problem: str = "poisson2d",
             **changes: Any) -> dict[str, Any]:
    """The paper's comparison (Schwarz vs global rank bound vs global parameter-matched)."""
    from ddops.experiments.compare import run_compare

    out = {}
    for preset in presets:
        c = _config(problem, preset, steps=steps, save_prefix=f"{prefix}_{preset}", **changes)
        t0 = time.perf_counter()
        metrics = run_compare(c, log=lambda line: print("   ", line, flush=True))
        out[preset] = {"seconds": time.perf_counter() - t0, "models": {
            k: {key: e.get(key) for key in ("num_params", "rank_bound", "val_wmse",
                                           "operator_rel_fro_error", "operator_error_method",
                                           "best_rank_fro_error", "mean_rel_l2", "status",
                                           "train_seconds")}
            for k, e in metrics.items()}}
        s = out[preset]["models"]["schwarz"]
        others = {k: e for k, e in out[preset]["models"].items() if k != "schwarz"}
        out[preset]["schwarz_lower_than"] = {k: s["val_wmse"] < e["val_wmse"]
                                             for k, e in others.items()}
    return out


def scaling(ns: list[int], steps: int, prefix: str, preset: str,
            rhs_modes: int | None = None) -> dict[str, Any]:
    from ddops.experiments.compare import run_scaling

    c = _config("poisson2d", preset, steps=steps, save_prefix=prefix, plots=False,
                rhs_modes=rhs_modes)
    out = {}
    for n in ns:
        t0 = time.perf_counter()
        rows = run_scaling(c, (n,), log=lambda line: print("   ", line, flush=True))
        r = rows[0]
        out[n] = {"N": r["N"], "unknowns": r["unknowns"], "wall_s": time.perf_counter() - t0,
                  "train_s": r["train_seconds"], "val_wmse": r["val_wmse"],
                  "operator_rel_fro_error": r["operator_rel_fro_error"],
                  "operator_error_method": r["operator_error_method"],
                  "num_params": r["num_params"], "status": r["status"]}
        print(f"  n={n} (N={r['N']}): {out[n]['wall_s']:.1f} s wall, "
              f"{r['train_seconds']:.1f} s training, val {r['val_wmse']:.3e}", flush=True)
    return out


def memory(n: int, steps: int, preset: str) -> dict[str, Any]:
    """tracemalloc peak of set-up plus a few steps against batch arrays plus parameters."""
    c = _config("poisson2d", preset, n=n, subdomains=(n // 32) ** 2)
    tracemalloc.start()
    t, prob = _trainer(c, 1)
    setup_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    t.run(steps)
    train_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    op = t.op
    batch = 4 * op.shape[0] * c.batch_size * 8          # F, U, prediction, gradient
    params = op.theta.nbytes
    reference = batch + params
    return {"n": n, "unknowns": int(op.shape[0]), "subdomains": int(c.subdomains),
            "batch_bytes": batch, "param_bytes": int(params), "setup_peak": setup_peak,
            "train_peak": train_peak, "peak_over_reference": max(setup_peak, train_peak)
            / reference}


def structure_bound(c: Any, ranks: tuple[int, ...]) -> dict[str, Any]:
    """Lower bound of the relative Frobenius error of any Schwarz attention operator."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import LinearOperator, cg

    import ddops
    from ddops.experiments.compare import build_problem

    prob = build_problem(c)
    A, d = prob.A, prob.decomposition
    Phi = prob.coarse if prob.coarse is not None else ddops.coarse_basis(d, c.coarse_basis)
    Phi = Phi.toarray()
    dense = A.toarray()
    inv = np.linalg.inv(dense)
    members = sp.csr_matrix((np.ones(d.indices.size),
                             (d.indices, np.repeat(np.arange(d.num_subdomains), d.sizes))),
                            shape=(d.num_dofs, d.num_subdomains))
    outside = ~((members @ members.T).toarray() > 0)   # pairs that share no subdomain
    n0 = Phi.shape[1]

    def normal(g: np.ndarray) -> np.ndarray:
        return (Phi.T @ ((Phi @ g.reshape(n0, n0) @ Phi.T) * outside) @ Phi).ravel()

    rhs = (Phi.T @ (inv * outside) @ Phi).ravel()
    g, info = cg(LinearOperator((n0 * n0, n0 * n0), matvec=normal), rhs, rtol=1e-10,
                 maxiter=5000)
    norm = float(np.linalg.norm(inv))
    bound = float(np.linalg.norm((inv - Phi @ g.reshape(n0, n0) @ Phi.T) * outside)) / norm
    galerkin = inv - Phi @ np.linalg.solve(Phi.T @ dense @ Phi, Phi.T)
    mu = np.sort(np.abs(1.0 / np.linalg.eigvalsh(dense)))[::-1]
    return {"unknowns": int(A.shape[0]), "subdomains": int(d.num_subdomains), "coarse_dim": n0,
            "schwarz_lower_bound": bound, "cg_info": int(info),
            "galerkin_remainder_outside_share": float(np.linalg.norm(galerkin[outside])
                                                      / np.linalg.norm(galerkin)),
            "best_global": {int(r): float(np.sqrt(np.sum(mu[r:] ** 2))) / norm for r in ranks}}


STRUCTURE_CASES = (
    ("poisson1d n=256, N=8, interface hats", "poisson1d", {}, (39, 5)),
    ("poisson2d 64x64, N=16 boxes, GDSW", "poisson2d", {}, (124, 6)),
    ("poisson2d 64x64, N=16 boxes, GDSW, overlap 2", "poisson2d", {"overlap": 2}, (124, 6)),
    ("poisson2d 32x32, N=16 boxes, GDSW", "poisson2d", {"n": 32}, (124, 6)),
    ("poisson3d 16^3, N=8 boxes, GDSW", "poisson3d", {}, (76, 11)),
    ("diffusion2d 64x64 (contrast 1e6), N=16 boxes, GDSW", "diffusion2d", {}, (124, 6)),
)


def structure() -> dict[str, Any]:
    out = {}
    for label, problem, changes, ranks in STRUCTURE_CASES:
        r = out[label] = structure_bound(_config(problem, "v2", **changes), ranks)
        print(f"structure {label}: any Schwarz attention M has ||A^-1 - M||_F / ||A^-1||_F >= "
              f"{r['schwarz_lower_bound']:.3f} (n0 = {r['coarse_dim']}); best global rank r: "
              + ", ".join(f"r={k}: {v:.3f}" for k, v in r["best_global"].items())
              + f"; Galerkin remainder outside the blocks "
              f"{r['galerkin_remainder_outside_share']:.3f}", flush=True)
    return out


def steptime(n: int, preset: str, modes: tuple[int, ...] = (8, 4)) -> dict[str, Any]:
    out = {}
    for m in modes:
        c = _config("poisson2d", preset, n=n, subdomains=(n // 32) ** 2, rhs_modes=m,
                    val_size=16)
        t0 = time.perf_counter()
        t, _ = _trainer(c, 1)
        setup = time.perf_counter() - t0
        t.run(2)
        before = t.seconds["total"]
        t.run(7)
        ms = 1e3 * (t.seconds["total"] - before) / 5
        out[m] = {"ms_per_step": ms, "projected_2000_steps_s": 2 * ms, "setup_s": setup,
                  "functions": (2 * m) ** 2}
        print(f"steptime n={n}, rhs modes {m} ({(2 * m) ** 2} functions): {ms:.0f} ms per step, "
              f"2000 steps ~ {2 * ms:.0f} s; set-up {setup:.1f} s", flush=True)
    return out


def ranks(steps: int = 500, local_ranks: tuple[int, ...] = (4, 16, 32)) -> dict[str, Any]:
    import ddops
    from ddops.experiments.compare import build_problem, run_compare
    from ddops.operators.losses import loss_value

    out: dict[str, Any] = {"steps": steps, "local_rank": {}}
    for r in local_ranks:
        c = _config("poisson2d", "improved", steps=steps, local_rank=r, global_ranks=(),
                    plots=False, save_prefix=f"results/beyond_1d/ranks/r{r}")
        e = run_compare(c, log=lambda line: None)["schwarz"]
        out["local_rank"][r] = {"val_wmse": e["val_wmse"], "num_params": e["num_params"],
                                "rank_bound": e["rank_bound"]}
        print(f"ranks: local rank {r}: val wMSE {e['val_wmse']:.3e} after {steps} steps "
              f"({e['num_params']} parameters)", flush=True)
    prob = build_problem(_config("poisson2d", "improved"))
    A, d, Phi = prob.A, prob.decomposition, prob.coarse
    F, U = prob.validation
    S = (Phi.T @ A @ Phi).toarray()
    classical = {"galerkin_coarse": Phi @ np.linalg.solve(S, Phi.T @ F)}
    for variant in ("additive", "hybrid"):
        classical[variant] = ddops.TwoLevelSchwarz(A, d, coarse_basis=Phi,
                                                   variant=variant).matmat(F)
    out["classical_val_wmse"] = {k: float(loss_value("wmse", P, U))
                                 for k, P in classical.items()}
    print("ranks: val wMSE with exact local solves: " + ", ".join(
        f"{k} {v:.3f}" for k, v in out["classical_val_wmse"].items()), flush=True)
    sv = np.linalg.svd(prob.sampler.inner.basis, compute_uv=False)
    out["basis_singular_values"] = {int(k): float(sv[k]) for k in (0, 60, 120, 125, 130, 200)}
    print(f"ranks: singular values of the {sv.size} right-hand-side functions: "
          + ", ".join(f"s[{k}] = {v:.3g}" for k, v in out["basis_singular_values"].items()),
          flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS[:-1]))
    p.add_argument("--rounds", type=int, default=5, help="interleaved blocks (default 5)")
    p.add_argument("--steps", type=int, default=20, help="steps per block (default 20)")
    p.add_argument("--train-steps", type=int, default=2000,
                   help="steps of the accuracy and scaling runs (default 2000)")
    p.add_argument("--presets", nargs="+", default=["improved", "v2"],
                   help="presets of the accuracy section (default improved v2)")
    p.add_argument("--scaling-ns", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--rhs-modes", type=int, default=None,
                   help="modes per direction of the right-hand sides in the scaling section "
                        "(default: the problem's, 8 in 2D: 256 functions)")
    p.add_argument("--blas-threads", type=int, default=1, help="default 1 (the Trainer's)")
    p.add_argument("--prefix", default="results/beyond_1d/run",
                   help="output prefix of the comparisons (default results/beyond_1d/run)")
    p.add_argument("--json", metavar="PATH", default=None)
    args = p.parse_args(argv)
    result: dict[str, Any] = {"load_average_start": os.getloadavg()}

    def save() -> None:
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(result, fh, indent=1, default=str)

    if "speed" in args.sections:
        r = result["speed"] = speed(args.rounds, args.steps, args.blas_threads)
        for name in ("2d_64x64_N16", "2d_64x64_N16_rhs_modes4", "1d_n4096_N128"):
            e = r[name]
            print(f"speed {name}: {e['steps_per_s']:.1f} steps/s ({e['median_ms']:.2f} ms, "
                  f"parts ms {json.dumps({k: round(v, 2) for k, v in e['parts_ms'].items()})}; "
                  f"p={e['padded_size']}, width {e['width']}, n0={e['coarse_dim']}, "
                  f"{e['rhs_functions']} rhs functions)", flush=True)
        print(f"speed: 2D step time / 1D step time = {r['ratio_2d_over_1d_time']:.2f}")
        print(r["profile_2d"])
        save()
    if "accuracy" in args.sections:
        r = result["accuracy"] = accuracy(args.presets, args.train_steps, args.prefix + "_p2d")
        for preset, e in r.items():
            print(f"accuracy {preset}: " + "; ".join(
                f"{k} val {m['val_wmse']:.3e} ({m['num_params']} params)"
                for k, m in e["models"].items()), flush=True)
        save()
    if "scaling" in args.sections:
        result["scaling"] = scaling(args.scaling_ns, args.train_steps, args.prefix + "_scaling",
                                    args.presets[0], args.rhs_modes)
        save()
    if "memory" in args.sections:
        r = result["memory"] = memory(max(args.scaling_ns), 3, args.presets[0])
        print(f"memory n={r['n']}: peak {max(r['setup_peak'], r['train_peak']) / 2**20:.1f} MiB "
              f"= {r['peak_over_reference']:.2f} x (batch arrays {r['batch_bytes'] / 2**20:.1f} "
              f"MiB + parameters {r['param_bytes'] / 2**20:.1f} MiB)", flush=True)
        save()
    if "other" in args.sections:
        result["other"] = {
            "poisson3d": accuracy(args.presets[:1], args.train_steps, args.prefix + "_p3d",
                                  "poisson3d", n=16, subdomains=8),
            "diffusion2d": accuracy(args.presets[:1], args.train_steps, args.prefix + "_hc",
                                    "diffusion2d", n=64, subdomains=16, contrast=1e6),
        }
        save()
    if "ranks" in args.sections:
        result["ranks"] = ranks()
        save()
    if "steptime" in args.sections:
        result["steptime"] = steptime(max(args.scaling_ns), args.presets[0])
        save()
    if "structure" in args.sections:
        result["structure"] = structure()
        save()
    result["load_average_end"] = os.getloadavg()
    save()
    print(f"load average: start {result['load_average_start']}, end "
          f"{result['load_average_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
