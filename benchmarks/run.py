"""Benchmark suite: ddops training throughput, memory and set-up against PyTorch peers.

Run from the repository root::

    python benchmarks/run.py                       # full suite (a few minutes)
    python benchmarks/run.py --quick               # smoke run: n = 256, 1024, short timings
    python benchmarks/run.py --sizes 256 8192 --dtypes float64 --json results/bench.json
    python benchmarks/run.py --plot docs/_static/performance.png

Configuration (the paper's, scaled up): element kind, ``N = n / 32``
subdomains with overlap 2, local rank ``r = 4``, coarse rank ``r0 = N - 1``
(interface hats), batch ``B = 256``, weighted MSE, AdamW with the plateau
scheduler, float64 and float32.

Every size and dtype runs in a fresh subprocess (so peak memory does not
mix), which measures, in this order:

1. set-up time: ``Decomposition1D`` + ``SchwarzOperator`` + ``FourierRHS``
   (basis and its exact solutions), in a fresh process and once more warm,
   with the assembly (decomposition, index arrays, weights, coarse CSR) and
   the draw of the initial factors reported apart;
2. full training steps per second with :class:`ddops.learning.training.Trainer`
   (data generation with exact solutions, forward, hand-derived backward,
   AdamW), split into data time and the rest, and the minor page faults per
   step;
3. the peak resident set size (``ru_maxrss``) against the bytes of ``F``,
   ``U``, the prediction and the parameters;
4. operator applications per second, ``op.matmat(F)`` on 256 columns;
5. the fixed cost of a step: the same training step with ``B = 1``;
6. for ``n <= 8192`` and when torch is installed: the PyTorch peers
   ``TorchSchwarzLoop`` and ``TorchSchwarzBatched`` (``benchmarks/torch_peer.py``)
   with 1 thread and with PyTorch's default threads, and the agreement of
   loss and gradients with ddops on the same parameters and batch (plus the
   full ``check_peer`` matrix at ``n = 256``).

The parent process measures the machine (``benchmarks/floor.py``: copy
bandwidth, GEMM rate), profiles training steps at ``n = 8192``, times the
step of ``--preset improved`` against ``--preset v2`` at ``n = 8192`` in
one process, interleaved (``benchmarks/presets.py``), times the 2D Poisson
step (64 x 64, 16 boxes, GDSW) against the 1D step at ``n = 4096`` in one
process, interleaved (``benchmarks/beyond_1d.py --sections speed``), and prints
the tables, the fitted exponent of time per step against ``n``, the floor
``max(bytes / bandwidth, flops / GEMM rate)`` next to the measured step
time, and which targets are met.  Times are medians over timed chunks.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from typing import Any

SIZES = (256, 1024, 8192, 32768, 131072)
QUICK_SIZES = (256, 1024)
DTYPES = ("float64", "float32")
BATCH = 256
MARK = "RESULT "


def lr_for(n: int) -> float:
    """Learning rate: the paper's 1e-3 at n = 256, scaled by 256 / n above.

    AdamW moves every parameter by about ``lr`` per step while the initial
    factors shrink like ``n^-1/2`` and the coarse product sums ``r0 = N - 1``
    such moves: with 1e-3 the loss explodes from n = 8192 on (98 -> 5478 in
    one step there).  Speed does not depend on it; the torch peers use the same.
    """
    return 1e-3 * min(1.0, 256 / n)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="smoke run: n = 256 and 1024, short timings, no profile")
    p.add_argument("--sizes", type=int, nargs="+", default=None,
                   help=f"problem sizes n (default {' '.join(map(str, SIZES))})")
    p.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    p.add_argument("--json", metavar="PATH", default=None, help="write all results as JSON")
    p.add_argument("--plot", metavar="PATH", default=None,
                   help="write the log-log plot of time per step against n (PNG)")
    p.add_argument("--min-time", type=float, default=None,
                   help="seconds per timed measurement (default 3, --quick 0.3)")
    p.add_argument("--blas-threads", type=int, nargs="+", default=None,
                   help="OPENBLAS_NUM_THREADS values for ddops; every size runs with each "
                        "and the best is reported (default: 1 and the number of CPUs)")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch peers")
    p.add_argument("--torch-max-n", type=int, default=8192,
                   help="largest n for the PyTorch peers (default 8192)")
    p.add_argument("--no-profile", action="store_true", help="skip the cProfile at n=8192")
    p.add_argument("--no-beyond-1d", action="store_true",
                   help="skip the 2D against 1D step time (benchmarks/beyond_1d.py)")
    p.add_argument("--no-presets", action="store_true",
                   help="skip the step time of --preset improved against v2 at n=8192")
    # internal: one size/dtype in this (fresh) process
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, default=256, help=argparse.SUPPRESS)
    p.add_argument("--dtype", default="float64", help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, nargs="+", default=None,
                   help="Trainer worker counts to try besides 1, each with 1 BLAS thread "
                        "(default: 2 on a machine with 2 or more CPUs)")
    p.add_argument("--train-workers", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--full-check", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ddops-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.blas_threads is None:
        args.blas_threads = sorted({1, os.cpu_count() or 1})
    if args.workers is None:
        args.workers = [2] if (os.cpu_count() or 1) >= 2 else []
    args.workers = sorted({w for w in args.workers if w > 1})
    if args.sizes is None:
        args.sizes = list(QUICK_SIZES if args.quick else SIZES)
    if args.min_time is None:
        args.min_time = 0.3 if args.quick else 3.0
    return args


ARGS = parse_args(sys.argv[1:] if __name__ == "__main__" else [])

import numpy as np  # noqa: E402

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import beyond_1d, floor, presets  # noqa: E402
from benchmarks.common import machine_info  # noqa: E402


# -- helpers ---------------------------------------------------------------------------------
def maxrss_bytes() -> int:
    """``ru_maxrss`` of this process (Linux reports kB, macOS bytes).

    On Linux it includes the high-water mark of the parent at the fork that
    started this process (the kernel keeps the pre-``exec`` peak), so the
    parent keeps itself small until every worker has run.
    """
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def peak_bytes() -> int:
    """Peak resident set size of this process image: ``VmHWM``, else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return maxrss_bytes()


def minflt() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


def chunked_rate(fn, min_time: float, chunks: int = 5) -> dict[str, float]:
    """Calls per second of ``fn()``: calibrate, then ``chunks`` timed chunks; median and best."""
    t = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t, 1e-7)
    total = max(chunks, math.ceil(min_time / one))
    chunks = min(chunks, total)
    per = math.ceil(total / chunks)
    rates = []
    for _ in range(chunks):
        t = time.perf_counter()
        for _ in range(per):
            fn()
        rates.append(per / (time.perf_counter() - t))
    return {"median": float(np.median(rates)), "best": float(max(rates)), "calls": per * chunks}


# -- the worker: one size and dtype in a fresh process ---------------------------------------
def profiled_setup(setup) -> tuple[Any, ...]:
    """Run ``setup`` under cProfile; split its seconds into assembly and parameter draw.

    ``assembly`` = decomposition + operator construction without drawing the
    initial factors (the O(n) part: index arrays, weights, coarse CSR);
    ``parameter_init`` = drawing and writing the factors (O(n^2) at r0 = N - 1).
    """
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    *objects, seconds = setup()
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    init = float(sum(v[3] for (_, _, fn), v in stats.items() if fn == "_draw_initial_factors"))
    seconds["parameter_init"] = init
    seconds["assembly"] = seconds["decomposition"] + seconds["operator"] - init
    return (*objects, seconds)


def time_training(op, rhs, B: int, min_time: float, chunks: int = 5,
                  workers: int = 1) -> dict[str, Any]:
    """Full training steps with ddops.learning.training.Trainer, timed in chunks."""
    from ddops.learning.training import Trainer, TrainingConfig

    cfg = TrainingConfig(steps=10**9, batch_size=B, lr=lr_for(op.shape[0] + 1), progress=False,
                         val_every=10**9, workers=min(workers, B))
    trainer = Trainer(op, rhs, cfg, train_seed=4711)
    trainer.run(2)                                   # allocates and touches every buffer
    t = time.perf_counter()
    trainer.run(trainer.step + 1)
    one = time.perf_counter() - t
    total = max(3, math.ceil(min_time / max(one, 1e-6)))
    chunks = min(chunks, total)
    per = math.ceil(total / chunks)
    rates, data_ms, rest_ms = [], [], []
    faults0, steps0 = minflt(), trainer.step
    for _ in range(chunks):
        before = dict(trainer.seconds)
        start = trainer.step
        status = trainer.run(start + per).status
        k = trainer.step - start
        if status != "finished" or k == 0:  # diverged: keep what was timed
            break
        rates.append(k / (trainer.seconds["total"] - before["total"]))
        data_ms.append(1e3 * (trainer.seconds["data"] - before["data"]) / k)
        rest_ms.append(1e3 * (trainer.seconds["step"] - before["step"]) / k)
    faults = (minflt() - faults0) / max(trainer.step - steps0, 1)
    hist = trainer.history["train"]
    if not rates:
        return {"steps_per_s": float("nan"), "steps_per_s_best": float("nan"),
                "data_ms": float("nan"), "compute_ms": float("nan"), "steps": trainer.step,
                "minflt_per_step": float("nan"), "loss_first": float(hist[0]),
                "loss_last": float(hist[-1]), "finite": False, "lr": cfg.lr}
    return {"lr": cfg.lr, "steps_per_s": float(np.median(rates)),
            "steps_per_s_best": float(max(rates)),
            "data_ms": float(np.median(data_ms)), "compute_ms": float(np.median(rest_ms)),
            "steps": int(trainer.step), "minflt_per_step": float(faults),
            "loss_first": float(hist[0]), "loss_last": float(hist[-1]),
            "finite": bool(np.all(np.isfinite(hist)))}


def torch_section(n: int, dtype: np.dtype, d, rhs, min_time: float,
                  full_check: bool) -> dict[str, Any]:
    """PyTorch peers in this process: agreement with ddops and steps per second."""
    try:
        import torch
    except ImportError:
        return {"status": "torch not installed"}
    import ddops
    from benchmarks import check_peer
    from benchmarks import torch_peer as tp

    out: dict[str, Any] = {"status": "ok", "version": torch.__version__,
                           "default_threads": torch.get_num_threads()}
    F, U = rhs.sample(BATCH, np.random.default_rng(123))
    Ft, Ut = torch.from_numpy(F), torch.from_numpy(U)
    peers = {"loop": tp.TorchSchwarzLoop, "batched": tp.TorchSchwarzBatched}

    def fresh():
        return ddops.SchwarzOperator(d, local_rank=floor.LOCAL_RANK, seed=0, dtype=dtype)

    # agreement: same parameters (copied from a ddops operator), same batch
    op = fresh()
    v_ref, g_ref = op.value_and_grad(F, U, "wmse")
    agree = {}
    for name, cls in peers.items():
        v, g = tp.value_and_grad(cls(op, dtype=tp.torch_dtype(dtype)), Ft, Ut, "wmse")
        agree[name] = {"loss": abs(v - v_ref) / abs(v_ref),
                       "grad": check_peer.dict_diff(g, g_ref)}
    out["agreement"] = agree
    out["tolerance"] = 1e-10 if dtype == np.float64 else 1e-4
    if full_check:
        res = check_peer.check(256, 8, 64, dtype, verbose=False)
        worst = max(res, key=res.get)
        out["check_peer"] = {"cases": len(res), "max": res[worst], "worst": worst}

    # steps per second: the user's training step (forward, loss, backward, AdamW, zero_grad)
    default = torch.get_num_threads()
    rates: dict[str, dict[str, float]] = {}
    try:
        for threads in sorted({1, default}):
            torch.set_num_threads(threads)
            for name, cls in peers.items():
                step = tp.make_step(cls(fresh(), dtype=tp.torch_dtype(dtype)), lr_for(n))
                for _ in range(3):
                    step(Ft, Ut)
                r = chunked_rate(lambda step=step: step(Ft, Ut), min_time / 2)
                rates.setdefault(name, {})[str(threads)] = r["median"]
    finally:
        torch.set_num_threads(default)
    out["steps_per_s"] = rates
    out["best"] = {name: max(v.values()) for name, v in rates.items()}
    return out


def worker(args: argparse.Namespace) -> dict[str, Any]:
    n, dtype, B = args.n, np.dtype(args.dtype), BATCH
    rss_start = peak_bytes()
    import ddops
    import ddops.learning.training  # noqa: F401 - loaded before the baseline is read
    from ddops.learning.data import FourierRHS

    rss_imports = peak_bytes()
    res: dict[str, Any] = {"n": n, "dtype": dtype.name, "B": B, "pid": os.getpid(),
                           "blas": floor.blas_threads()}
    N = n // floor.ELEMENTS_PER_SUBDOMAIN

    def setup() -> tuple[Any, Any, Any, dict[str, float]]:
        t0 = time.perf_counter()
        d = ddops.Decomposition1D(n, N, overlap=2, kind="element")
        t1 = time.perf_counter()
        op = ddops.SchwarzOperator(d, local_rank=floor.LOCAL_RANK, seed=0, dtype=dtype)
        t2 = time.perf_counter()
        rhs = FourierRHS(n, kind="element", dtype=dtype)
        t3 = time.perf_counter()
        return d, op, rhs, {"decomposition": t1 - t0, "operator": t2 - t1, "rhs": t3 - t2,
                            "total": t3 - t0}

    d, op, rhs, res["setup"] = profiled_setup(setup)         # cold: fresh process
    res["setup_warm"] = profiled_setup(setup)[3]
    res["model"] = floor.step_model(op, B)
    res["N"], res["r0"], res["num_params"] = N, op.coarse_rank, op.num_params
    rss_setup = peak_bytes()

    res["train"] = time_training(op, rhs, B, args.min_time, workers=args.train_workers)
    if args.ddops_only:
        return res
    rss_train = peak_bytes()
    ru_maxrss_train = maxrss_bytes()
    m = op.shape[0]
    batch_bytes = 3 * m * B * dtype.itemsize                 # F, U and the prediction
    param_bytes = op.theta.nbytes
    res["memory"] = {"rss_start": rss_start, "rss_imports": rss_imports,
                     "rss_setup": rss_setup, "rss_train": rss_train,
                     "batch_bytes": batch_bytes, "param_bytes": param_bytes,
                     "ru_maxrss_train": ru_maxrss_train,
                     "ratio": rss_train / (batch_bytes + param_bytes),
                     "ratio_above_imports": (rss_train - rss_imports) / (batch_bytes
                                                                         + param_bytes)}

    F, _ = rhs.sample(B, np.random.default_rng(7))
    op.matmat(F)
    res["matmat"] = chunked_rate(lambda: op.matmat(F), args.min_time / 2)
    res["memory"]["rss_after_matmat"] = peak_bytes()

    # fixed cost of a step: Python, dispatch and parameter-sized work (B = 1), timed like
    # the full steps (many steps per Trainer.run call, so the call's own cost is amortised)
    tiny = time_training(ddops.SchwarzOperator(d, local_rank=floor.LOCAL_RANK, seed=0,
                                               dtype=dtype),
                         FourierRHS(n, kind="element", dtype=dtype), 1, min(args.min_time, 1.0))
    res["b1_step_ms"] = 1e3 / tiny["steps_per_s"]

    if n <= args.torch_max_n and not args.no_torch:
        res["torch"] = torch_section(n, dtype, d, rhs, args.min_time, args.full_check)
    elif args.no_torch:
        res["torch"] = {"status": "skipped (--no-torch)"}
    else:
        res["torch"] = {"status": f"skipped (n > {args.torch_max_n})"}
    return res


# -- the parent: run workers, analyse, report -------------------------------------------------
def run_worker(args: argparse.Namespace, n: int, dtype: str, threads: int,
               primary: bool, workers: int = 1) -> dict[str, Any]:
    """One fresh process for (n, dtype) with ``threads`` BLAS threads; its result dict.

    The primary worker measures everything; the others only set-up and training
    (with ``workers`` Trainer workers).
    """
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--n", str(n),
           "--dtype", dtype, "--min-time", str(args.min_time),
           "--torch-max-n", str(args.torch_max_n), "--train-workers", str(workers)]
    if args.no_torch:
        cmd.append("--no-torch")
    if not primary:
        cmd.append("--ddops-only")
    elif n == 256 and not args.quick:
        cmd.append("--full-check")
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in proc.stdout.splitlines()[::-1]:
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {"n": n, "dtype": dtype, "error": f"worker exited {proc.returncode}: "
            + " | ".join(tail)}


def config_label(threads: int, workers: int) -> str:
    """``"2 BLAS thr"`` or ``"2 workers"`` (each worker with 1 BLAS thread)."""
    return f"{threads} BLAS thr" if workers == 1 else f"{workers} workers"


def merge_threads(runs: dict[tuple[int, int], dict[str, Any]]) -> dict[str, Any]:
    """One result per (n, dtype): the primary run, with training at the best configuration.

    ``runs`` maps ``(BLAS threads, Trainer workers)`` to a worker's result.
    """
    configs = list(runs)
    primary = dict(runs[configs[0]])
    if "error" in primary:
        return primary
    by = {cfg: r["train"] for cfg, r in runs.items() if "error" not in r}
    primary["train_by_threads"] = {config_label(*cfg): v for cfg, v in by.items()}
    best = max(by, key=lambda cfg: by[cfg]["steps_per_s"])
    primary["train"] = dict(by[best], blas_threads=best[0], workers=best[1])
    primary["setup_by_threads"] = {config_label(*cfg): r["setup"]["total"]
                                   for cfg, r in runs.items() if "error" not in r}
    return primary


def fit_exponent(ns: list[float], ts: list[float]) -> float | None:
    """Slope of log t against log n (least squares); None for fewer than two points."""
    if len(ns) < 2:
        return None
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0])


def _mb(x: float) -> str:
    return f"{x / 2**20:,.0f}"


def _agree_max(t: dict[str, Any]) -> float | None:
    if t.get("status") != "ok":
        return None
    return max(max(v["loss"], v["grad"]) for v in t["agreement"].values())


def tables(results: list[dict[str, Any]], machine: dict[str, Any]) -> str:
    ok = [r for r in results if "error" not in r]
    lines = ["ddops (SchwarzOperator, element kind, N = n/32, r = 4, r0 = N - 1, B = 256)",
             f"{'n':>7} {'dtype':>7} {'setup s':>8} {'assembly':>8} {'init s':>7} {'thr':>3} "
             f"{'wrk':>3} "
             f"{'steps/s':>8} "
             f"{'data ms':>8} "
             f"{'rest ms':>8} {'B=1 ms':>7} {'matmat/s':>9} {'peak MB':>8} {'F,U,P+θ MB':>10} "
             f"{'ratio':>5} {'faults/step':>11}"]
    for r in ok:
        t, mem = r["train"], r["memory"]
        lines.append(
            f"{r['n']:>7} {r['dtype']:>7} {r['setup']['total']:>8.3f} "
            f"{r['setup']['assembly']:>8.3f} {r['setup']['parameter_init']:>7.3f} "
            f"{t['blas_threads']:>3} {t['workers']:>3} "
            f"{t['steps_per_s']:>8.1f} "
            f"{t['data_ms']:>8.2f} {t['compute_ms']:>8.2f} {r['b1_step_ms']:>7.3f} "
            f"{r['matmat']['median']:>9.1f} {_mb(mem['rss_train']):>8} "
            f"{_mb(mem['batch_bytes'] + mem['param_bytes']):>10} {mem['ratio']:>5.2f} "
            f"{t['minflt_per_step']:>11.1f}")
    for r in results:
        if "error" in r:
            lines.append(f"{r['n']:>7} {r['dtype']:>7} ERROR {r['error']}")
    lines.append("")
    lines.append("PyTorch peers (same process, fixed batch; steps/s with 1 thread / default "
                 "threads; ratio = ddops / best peer, full step and without data)")
    lines.append(f"{'n':>7} {'dtype':>7} {'loop 1t':>8} {'loop dt':>8} {'batch 1t':>8} "
                 f"{'batch dt':>8} {'ddops':>8} {'ddops-nd':>8} {'x batch':>7} {'x b-nd':>7} "
                 f"{'x loop':>7} {'agree':>9}")
    for r in ok:
        t = r.get("torch", {})
        if t.get("status") != "ok":
            if r["n"] <= 8192:
                lines.append(f"{r['n']:>7} {r['dtype']:>7} {t.get('status', 'no result')}")
            continue
        sp, dd = t["steps_per_s"], r["train"]["steps_per_s"]
        nd = 1e3 / r["train"]["compute_ms"]
        d_t = str(t["default_threads"])
        lines.append(
            f"{r['n']:>7} {r['dtype']:>7} {sp['loop']['1']:>8.1f} {sp['loop'][d_t]:>8.1f} "
            f"{sp['batched']['1']:>8.1f} {sp['batched'][d_t]:>8.1f} {dd:>8.1f} {nd:>8.1f} "
            f"{dd / t['best']['batched']:>7.2f} {nd / t['best']['batched']:>7.2f} "
            f"{dd / t['best']['loop']:>7.2f} {_agree_max(t):>9.1e}")
    for r in ok:
        c = r.get("torch", {}).get("check_peer")
        if c:
            lines.append(f"check_peer matrix ({r['dtype']}, n=256, {c['cases']} comparisons): "
                         f"max relative difference {c['max']:.2e} ({c['worst']})")
    return "\n".join(lines)


def floor_table(results: list[dict[str, Any]], machine: dict[str, Any]) -> tuple[str, list]:
    rows, lines = [], [
        f"machine: copy bandwidth {machine['bandwidth'] / 1e9:.1f} GB/s (256 MB), first-touch "
        f"writes {machine['first_touch'] / 1e9:.2f} GB/s; GEMM " + ", ".join(
            f"{k} {v / 1e9:.1f} GFlop/s" for k, v in machine["gemm"].items()),
        f"{'n':>7} {'dtype':>7} {'min MB':>8} {'impl MB':>8} {'GFlop':>7} {'coarse':>6} "
        f"{'BW GB/s':>7} {'t_mem':>8} {'t_impl':>8} {'t_flop':>8} {'measured':>9} "
        f"{'x floor':>7}"]
    for r in results:
        if "error" in r:
            continue
        model = r["model"]
        bw = machine["bandwidth_at"].get(f"{r['n']}/{r['dtype']}", machine["bandwidth"])
        ft = floor.floor_time(model, bw, machine["gemm"][r["dtype"]])
        t_impl = model["bytes_implemented"] / bw
        measured = 1.0 / r["train"]["steps_per_s"]
        row = {"n": r["n"], "dtype": r["dtype"], "t_mem": ft["memory"], "t_impl": t_impl,
               "t_flop": ft["compute"], "floor": ft["floor"], "measured": measured,
               "ratio": measured / ft["floor"], "bandwidth": bw,
               "coarse_share": model["flops"]["coarse"] / model["flops_total"]}
        rows.append(row)
        lines.append(
            f"{r['n']:>7} {r['dtype']:>7} {model['bytes_minimal'] / 1e6:>8.1f} "
            f"{model['bytes_implemented'] / 1e6:>8.1f} {model['flops_total'] / 1e9:>7.3f} "
            f"{100 * row['coarse_share']:>5.0f}% {bw / 1e9:>7.1f} {ft['memory'] * 1e3:>6.2f}ms "
            f"{t_impl * 1e3:>6.2f}ms {ft['compute'] * 1e3:>6.2f}ms {measured * 1e3:>7.2f}ms "
            f"{row['ratio']:>7.2f}")
    return "\n".join(lines), rows


def targets(results: list[dict[str, Any]]) -> list[tuple[str, str, bool | None]]:
    by = {(r["n"], r["dtype"]): r for r in results if "error" not in r}
    out: list[tuple[str, str, bool | None]] = []

    def add(name, key, value_fn, ok_fn):
        r = by.get(key)
        if r is None:
            out.append((name, "not measured", None))
            return
        try:
            text, ok = value_fn(r), ok_fn(r)
        except (KeyError, TypeError):
            out.append((name, "not measured", None))
            return
        out.append((name, text, ok))

    add("n=256 float64: >= 1000 full steps/s", (256, "float64"),
        lambda r: f"{r['train']['steps_per_s']:.0f} steps/s",
        lambda r: r["train"]["steps_per_s"] >= 1000)
    def vs_batched(r, data: bool = True) -> float:
        ddops = r["train"]["steps_per_s"] if data else 1e3 / r["train"]["compute_ms"]
        return ddops / r["torch"]["best"]["batched"]

    add("n=256 float64: >= 8x the batched torch peer (ddops full step vs best peer step)",
        (256, "float64"),
        lambda r: f"{vs_batched(r):.2f}x (ddops without data: {vs_batched(r, False):.2f}x)",
        lambda r: vs_batched(r) >= 8)
    add("n=8192 float64: >= 50 full steps/s", (8192, "float64"),
        lambda r: f"{r['train']['steps_per_s']:.1f} steps/s",
        lambda r: r["train"]["steps_per_s"] >= 50)
    if (8192, "float32") in by and (8192, "float64") in by:
        f32 = by[(8192, "float32")]["train"]["steps_per_s"]
        f64 = by[(8192, "float64")]["train"]["steps_per_s"]
        out.append(("n=8192 float32: more steps/s than float64",
                    f"{f32:.1f} vs {f64:.1f} steps/s", f32 > f64))
    for dt in DTYPES:
        add(f"n=131072 {dt}: trains (finite, decreasing loss)", (131072, dt),
            lambda r: f"loss {r['train']['loss_first']:.4g} -> {r['train']['loss_last']:.4g} "
                      f"in {r['train']['steps']} steps",
            lambda r: r["train"]["finite"] and r["train"]["loss_last"] < r["train"]["loss_first"])
        add(f"n=131072 {dt}: peak RSS < 4x (F, U, prediction + parameters)", (131072, dt),
            lambda r: f"{r['memory']['ratio']:.2f}x "
                      f"({_mb(r['memory']['rss_train'])} MB peak)",
            lambda r: r["memory"]["ratio"] < 4)
        add(f"n=131072 {dt}: set-up (decomposition + sparse assembly) < 1 s", (131072, dt),
            lambda r: f"{r['setup']['assembly']:.3f} s cold ({r['setup']['total']:.3f} s with "
                      f"the parameter draw and FourierRHS)",
            lambda r: r["setup"]["assembly"] < 1)
    return out


def plot(results: list[dict[str, Any]], rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ok = [r for r in results if "error" not in r]
    styles = {"float64": "-", "float32": "--"}
    for dt in DTYPES:
        rs = sorted((r for r in ok if r["dtype"] == dt), key=lambda r: r["n"])
        if not rs:
            continue
        ns = [r["n"] for r in rs]
        ax.loglog(ns, [1e3 / r["train"]["steps_per_s"] for r in rs], "o" + styles[dt],
                  color="C0", label=f"ddops {dt} (full step)")
        ax.loglog(ns, [r["train"]["compute_ms"] for r in rs], "." + styles[dt], color="C0",
                  alpha=0.5, label=f"ddops {dt} (without data)")
        for i, peer in enumerate(("batched", "loop")):
            pts = [(r["n"], 1e3 / r["torch"]["best"][peer]) for r in rs
                   if r.get("torch", {}).get("status") == "ok"]
            if pts:
                ax.loglog(*zip(*pts), "s" + styles[dt], color=f"C{i + 1}",
                          label=f"torch {peer} {dt} (best threads)")
        fl = sorted((row["n"], row["floor"] * 1e3) for row in rows if row["dtype"] == dt)
        if fl:
            ax.loglog(*zip(*fl), ":" if dt == "float64" else "-.", color="0.4",
                      label=f"floor {dt}")
    ax.set_xlabel("n")
    ax.set_ylabel("time per training step [ms]")
    ax.set_title("Training step, B = 256, N = n/32 (2-core CPU)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(args: argparse.Namespace) -> int:
    if args.worker:
        res = worker(args)
        print(MARK + json.dumps(res))
        return 0
    t_start = time.perf_counter()
    info = machine_info()
    print(f"machine: {info.get('cpu')}, {info['cpus']} CPUs, {info.get('memory_gib')} GiB; "
          f"python {info['python']}, numpy {info['numpy']} ({info['numpy_blas']}), "
          f"scipy {info['scipy']} ({info['scipy_blas']})")
    try:  # the version only: importing torch here would inflate the workers' ru_maxrss
        from importlib.metadata import PackageNotFoundError, version
        info["torch"] = version("torch")
    except PackageNotFoundError:
        info["torch"] = "torch not installed"
    print(f"torch: {info['torch']}; ddops BLAS threads tried: {args.blas_threads}, Trainer "
          f"workers tried (1 BLAS thread each): {args.workers}")
    info["load_start"] = os.getloadavg()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in info['load_start'])}")
    results = []
    for dt in args.dtypes:
        for n in args.sizes:
            t = time.perf_counter()
            configs = ([(th, 1) for th in args.blas_threads]
                       + [(1, w) for w in args.workers])
            runs = {cfg: run_worker(args, n, dt, cfg[0], primary=(i == 0), workers=cfg[1])
                    for i, cfg in enumerate(configs)}
            results.append(merge_threads(runs))
            r = results[-1]
            status = r.get("error") or (
                ", ".join(f"{label} {v['steps_per_s']:.1f}"
                          for label, v in r["train_by_threads"].items())
                + f" steps/s; torch: {r['torch'].get('status')}")
            print(f"  n={n:<7} {dt}: {status} ({time.perf_counter() - t:.1f} s)", flush=True)
    # after the workers: this process's peak would otherwise show in their ru_maxrss
    machine = floor.measure_machine(tuple(args.sizes), tuple(args.dtypes), args.quick,
                                    tuple(args.blas_threads))
    facts = {}
    if not args.quick:
        for th in args.blas_threads:
            floor.set_blas_threads(th)
            facts[str(th)] = floor.spmm_vs_gather(8192, np.float64)
    profile = None
    if not args.quick and not args.no_profile and "float64" in args.dtypes:
        profile = floor.profile_step(8192, np.float64, steps=10)
    preset_times = None
    if not args.quick and not args.no_presets:
        floor.set_blas_threads(1)  # the Trainer's default
        preset_times = presets.compare_presets(8192)
    beyond = None
    if not args.quick and not args.no_beyond_1d:
        beyond = beyond_1d.speed(rounds=5, steps=20, blas_threads=1)
    load_end = os.getloadavg()

    print()
    print(tables(results, machine))
    print()
    ok = [r for r in results if "error" not in r]
    fits = {}
    for dt in args.dtypes:
        rs = [r for r in ok if r["dtype"] == dt and r["n"] >= 1024]
        fits[dt] = {
            "step": fit_exponent([r["n"] for r in rs], [1 / r["train"]["steps_per_s"] for r in rs]),
            "without_data": fit_exponent([r["n"] for r in rs],
                                         [r["train"]["compute_ms"] for r in rs]),
            "data": fit_exponent([r["n"] for r in rs], [r["train"]["data_ms"] for r in rs]),
            "setup": fit_exponent([r["n"] for r in rs], [r["setup_warm"]["total"] for r in rs]),
            "assembly": fit_exponent([r["n"] for r in rs],
                                     [r["setup_warm"]["assembly"] for r in rs]),
        }
        f = fits[dt]
        if f["step"] is not None:
            print(f"{dt}: time per step ~ n^{f['step']:.2f} (n >= 1024; without data "
                  f"n^{f['without_data']:.2f}, data n^{f['data']:.2f}); warm set-up "
                  f"~ n^{f['setup']:.2f}, of which the assembly ~ n^{f['assembly']:.2f}")
    print()
    ftext, frows = floor_table(results, machine)
    print("floor: max(bytes / bandwidth, flops / GEMM rate) per training step")
    print(ftext)
    for th, f in facts.items():
        gbs = {k: f["bytes"] / f[k] / 1e9 for k in ("spmm", "gather", "fresh")}
        print(f"restriction D^1/2 R F at n=8192 float64 ({th} BLAS thread(s)): scipy SpMM "
              f"into a reused buffer {f['spmm'] * 1e3:.2f} ms ({gbs['spmm']:.1f} GB/s, of which "
              f"zeroing {f['zero'] * 1e3:.2f} ms), the row gather ddops runs "
              f"{f['gather'] * 1e3:.2f} ms ({gbs['gather']:.1f} GB/s), S @ F into a new array "
              f"{f['fresh'] * 1e3:.2f} ms")
    if profile:
        print()
        print("cProfile, 10 training steps at n=8192 float64 (sorted by own time):")
        print("\n".join(line for line in profile.splitlines() if line.strip())[:4000])
    tg = targets(results)
    if preset_times is not None:
        print()
        print("presets: " + presets.summary(preset_times))
        tg.append(("n=8192 float64: --preset improved step <= 1.10 x --preset v2 (one process, "
                   "interleaved)", f"{preset_times['ratio']:.3f}x", preset_times["ratio"] <= 1.10))
    if beyond is not None:
        two, one = beyond["2d_64x64_N16"], beyond["1d_n4096_N128"]
        print()
        print(f"beyond 1D: 2D Poisson 64x64 (16 boxes, GDSW) {two['steps_per_s']:.1f} steps/s, "
              f"1D n=4096 (N=128) {one['steps_per_s']:.1f} steps/s in the same process; data "
              f"{two['parts_ms']['data']:.1f} ms of {two['median_ms']:.1f} ms per 2D step")
        tg.append(("2D Poisson 64x64, 16 subdomains, float64, B=256: >= 200 training steps/s",
                   f"{two['steps_per_s']:.1f} steps/s ({beyond['ratio_2d_over_1d_time']:.2f}x "
                   f"the 1D step at n=4096)", two["steps_per_s"] >= 200))
    print()
    print("targets:")
    for name, value, met in tg:
        flag = {True: "MET", False: "NOT MET", None: "n/a"}[met]
        print(f"  [{flag:>7}] {name}: {value}")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in load_end)}; "
          f"total {time.perf_counter() - t_start:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine_info": info, "machine": machine, "results": results,
                       "fits": fits, "floor": frows, "profile": profile, "spmm_facts": facts,
                       "presets": preset_times, "beyond_1d": beyond,
                       "targets": [{"target": a, "value": b, "met": c} for a, b, c in tg],
                       "load_end": load_end, "argv": sys.argv}, fh, indent=1)
        print(f"wrote {args.json}")
    if args.plot:
        plot(results, frows, args.plot)
        print(f"wrote {args.plot}")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(ARGS))
