"""Check and time the CuPy path of ddops on a GPU, against the CPU and a PyTorch CUDA peer.

Run from the repository root on a machine with CuPy and a GPU (torch with
CUDA optional)::

    python benchmarks/gpu_check.py                 # everything, a few minutes
    python benchmarks/gpu_check.py --quick         # agreement + n = 8192, 32768 only
    python benchmarks/gpu_check.py --sizes 8192 131072 --dtypes float32 --json results/gpu.json

1. Agreement, float64 and float32 (``n = 1024, N = 32, B = 64``): a
   ``SchwarzOperator`` with ``backend="cupy"`` and one with ``"numpy"``,
   built from the same seed, on the same batch: ``matvec``, ``rmatvec``,
   ``matmat``, the loss and the flat gradient of ``value_and_grad_flat``
   (relative differences, tolerance 1e-10 / 1e-4), then 20 training steps
   with ``Trainer`` and ``FourierRHS(backend=...)`` on each side from the
   same training seed (the coefficients are drawn on the host, so both sides
   see the same batches): the two loss histories (tolerance 1e-8 / 1e-3).
2. Speed, ``n = 8192 ... 1048576`` (``N = n / 32``, ``r = 4``,
   ``r0 = N - 1``, ``B = 256``), float32 and float64: full training steps
   per second with ``Trainer(TrainingConfig(log_every=k))`` (the loss is
   fetched from the device only every ``k`` steps, so there is no host round
   trip per step; timed from a synchronised start to the flush at the end of
   the run), the same step without data generation (``value_and_grad_flat``
   + AdamW on a fixed batch), and the PyTorch peer ``TorchSchwarzBatched`` on
   ``device="cuda"`` with ``torch.optim.AdamW`` on the same fixed batch, its
   loss also fetched every ``k`` steps.  Timing uses CUDA events around
   whole chunks of steps.

The last thing printed is a short table.  Exit status 0 when every agreement
check passes, 1 when one fails, 2 (with one line) when CuPy or a GPU is
missing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SIZES = (8192, 32768, 131072, 262144, 524288, 1048576)
QUICK_SIZES = (8192, 32768)
DTYPES = ("float32", "float64")
BATCH = 256
LR = 1e-3  # the agreement runs (n = 1024)


def lr_for(n: int) -> float:
    """As ``benchmarks/run.py``: 1e-3 at n = 256, scaled by 256 / n above (speed-neutral)."""
    return 1e-3 * min(1.0, 256 / n)
TOL = {"float64": 1e-10, "float32": 1e-4}
TOL_TRAIN = {"float64": 1e-8, "float32": 1e-3}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="agreement and the two smallest sizes")
    p.add_argument("--sizes", type=int, nargs="+", default=None)
    p.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    p.add_argument("--log-every", type=int, default=50,
                   help="fetch the loss from the device every this many steps (default 50)")
    p.add_argument("--min-time", type=float, default=2.0,
                   help="seconds per timed measurement (default 2)")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch CUDA peer")
    p.add_argument("--max-coarse-rank", type=int, default=4095,
                   help="cap of r0 = N - 1 (default 4095; 0: no cap). Q0, K0 are n0 x r0 "
                        "dense: uncapped, n = 1048576 has 2.1e9 coarse parameters")
    p.add_argument("--json", metavar="PATH", default=None)
    args = p.parse_args(argv)
    if args.sizes is None:
        args.sizes = list(QUICK_SIZES if args.quick else SIZES)
    return args


def gpu_or_reason() -> str | None:
    """None when CuPy sees a GPU, else a one-line reason."""
    try:
        import cupy
    except Exception as exc:  # noqa: BLE001 - ImportError or a broken CUDA installation
        return f"CuPy is not importable ({type(exc).__name__}: {exc})".splitlines()[0]
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - no driver
        return f"CuPy sees no GPU ({type(exc).__name__}: {exc})".splitlines()[0]
    if count < 1:
        return "CuPy sees no GPU"
    from ddops.backend import cupy_available

    if not cupy_available():
        return "ddops.backend.cupy_available() is False"
    return None


def rel(a: Any, b: Any) -> float:
    """``||a - b|| / ||b||`` on the host, in float64."""
    from ddops.backend import to_numpy

    a = np.asarray(to_numpy(a), dtype=np.float64).ravel()
    b = np.asarray(to_numpy(b), dtype=np.float64).ravel()
    nb = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / (nb if nb > 0 else 1.0))


def synchronize() -> None:
    import cupy

    cupy.cuda.Device().synchronize()


def gpu_seconds(fn) -> float:
    """Seconds of ``fn()`` on the current stream, between two CUDA events."""
    import cupy

    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    fn()
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / 1e3


# -- 1. agreement ------------------------------------------------------------------------------
def agreement(dtype_name: str, n: int = 1024, B: int = 64, steps: int = 20) -> dict[str, Any]:
    import cupy

    import ddops
    from ddops.data import FourierRHS
    from ddops.training import Trainer, TrainingConfig

    dtype = np.dtype(dtype_name)
    d = ddops.Decomposition1D(n, n // 32, overlap=2, kind="element")
    ops = {b: ddops.SchwarzOperator(d, local_rank=4, seed=0, dtype=dtype, backend=b)
           for b in ("numpy", "cupy")}
    F, U = FourierRHS(n, dtype=dtype).sample(B, np.random.default_rng(5))
    Fc, Uc = cupy.asarray(F), cupy.asarray(U)
    out: dict[str, Any] = {"dtype": dtype_name}
    out["theta"] = rel(ops["cupy"].theta, ops["numpy"].theta)
    out["matvec"] = rel(ops["cupy"].matvec(Fc[:, 0]), ops["numpy"].matvec(F[:, 0]))
    out["rmatvec"] = rel(ops["cupy"].rmatvec(Fc[:, 0]), ops["numpy"].rmatvec(F[:, 0]))
    out["matmat"] = rel(ops["cupy"].matmat(Fc), ops["numpy"].matmat(F))
    vc, gc = ops["cupy"].value_and_grad_flat(Fc, Uc, "wmse")
    vn, gn = ops["numpy"].value_and_grad_flat(F, U, "wmse")
    out["loss"] = rel(vc, vn)
    out["grad"] = rel(gc, gn)
    # training: same seeds, the data sampled on each backend
    hist = {}
    for b in ("numpy", "cupy"):
        op = ddops.SchwarzOperator(d, local_rank=4, seed=0, dtype=dtype, backend=b)
        cfg = TrainingConfig(steps=steps, batch_size=B, lr=LR, progress=False, val_every=10**9,
                             log_every=5 if b == "cupy" else 1)
        hist[b] = Trainer(op, FourierRHS(n, dtype=dtype, backend=b), cfg,
                          train_seed=4711).run().history["train"]
    out["train_steps"] = int(len(hist["cupy"]))
    out["train_losses"] = (float(np.max(np.abs(hist["cupy"] - hist["numpy"])
                                        / np.abs(hist["numpy"])))
                           if len(hist["cupy"]) == len(hist["numpy"]) == steps else math.inf)
    keys = ("theta", "matvec", "rmatvec", "matmat", "loss", "grad")
    out["ok"] = bool(all(out[k] < TOL[dtype_name] for k in keys)
                     and out["train_losses"] < TOL_TRAIN[dtype_name])
    return out


# -- 2. speed ----------------------------------------------------------------------------------
def coarse_rank_for(n: int, cap: int) -> int:
    """``r0 = N - 1``, capped at ``cap`` (0: no cap)."""
    r0 = n // 32 - 1
    return r0 if cap <= 0 else min(r0, cap)


def chunk_rate(run_chunk, one: float, min_time: float) -> float:
    """Median steps/s of three timed chunks; ``run_chunk(k)`` runs k steps."""
    k = max(1, int(min_time / 3 / max(one, 1e-6)))
    return float(np.median([k / gpu_seconds(lambda: run_chunk(k)) for _ in range(3)]))


def time_case(n: int, dtype_name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Set-up, the torch peer (first, from the initial factors), then ddops, for one case."""
    import cupy

    import ddops
    from ddops.data import FourierRHS
    from ddops.optim import AdamW
    from ddops.training import Trainer, TrainingConfig

    dtype = np.dtype(dtype_name)
    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    r0 = coarse_rank_for(n, args.max_coarse_rank)
    t0 = time.perf_counter()
    d = ddops.Decomposition1D(n, n // 32, overlap=2, kind="element")
    op = ddops.SchwarzOperator(d, local_rank=4, coarse_rank=r0, seed=0, dtype=dtype,
                               backend="cupy")
    rhs = FourierRHS(n, dtype=dtype, backend="cupy")
    synchronize()
    out: dict[str, Any] = {"r0": r0, "setup_s": time.perf_counter() - t0,
                           "num_params": int(op.num_params)}
    F, U = rhs.sample(BATCH, np.random.default_rng(7))          # the fixed batch
    if args.no_torch:
        out["torch"] = {"status": "skipped"}
    else:
        try:
            out["torch"] = time_torch(op, F, U, args.log_every, args.min_time)
            import torch

            torch.cuda.empty_cache()  # give the peer's cached blocks back before ddops runs
        except Exception as exc:  # noqa: BLE001 - report and go on (e.g. out of memory)
            out["torch"] = {"status": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}
    log_every = args.log_every
    cfg = TrainingConfig(steps=10**9, batch_size=BATCH, lr=lr_for(n), progress=False,
                         val_every=10**9, log_every=log_every)
    trainer = Trainer(op, rhs, cfg, train_seed=4711)
    trainer.run(3)                                      # warm-up: cuBLAS, pool, kernels
    one = gpu_seconds(lambda: trainer.run(trainer.step + 3)) / 3
    # Trainer.run ends with a flush of the buffered losses (one device-to-host copy)
    out["steps_per_s"] = chunk_rate(lambda k: trainer.run(trainer.step + k), one, args.min_time)
    hist = trainer.history["train"]
    out["steps"] = int(trainer.step)
    out["finite"] = bool(np.all(np.isfinite(hist)))
    out["loss_first"], out["loss_last"] = float(hist[0]), float(hist[-1])
    # without data: the fixed batch, forward + backward + AdamW, loss fetched every log_every
    opt = AdamW([op.theta], lr=lr_for(n), weight_decay=0.0)
    grad = cupy.empty_like(op.theta)
    losses: list[Any] = []

    def compute(k: int) -> None:
        for i in range(k):
            v, g = op.value_and_grad_flat(F, U, "wmse", out=grad, check=False)
            opt.step([g])
            losses.append(v)
            if (i + 1) % log_every == 0 or i == k - 1:
                float(cupy.stack(losses)[-1])
                losses.clear()

    compute(3)
    out["compute_steps_per_s"] = chunk_rate(compute, one, args.min_time)
    out["matmat_per_s"] = chunk_rate(lambda k: [op.matmat(F) for _ in range(k)], one / 3,
                                     args.min_time / 2)
    synchronize()
    out["pool_bytes"] = int(pool.total_bytes())
    out["batch_param_bytes"] = 3 * op.shape[0] * BATCH * dtype.itemsize + int(op.theta.nbytes)
    return out  # the arrays are released here; the next case starts with free_all_blocks()


def time_torch(op: Any, F: Any, U: Any, log_every: int, min_time: float) -> dict[str, Any]:
    """``TorchSchwarzBatched`` on CUDA from the factors of ``op``; AdamW; the same batch."""
    try:
        import torch
    except ImportError:
        return {"status": "torch not installed"}
    if not torch.cuda.is_available():
        return {"status": "torch has no CUDA"}
    from benchmarks import torch_peer as tp

    Ft = torch.from_dlpack(F)              # zero-copy views of the cupy batch
    Ut = torch.from_dlpack(U)
    out: dict[str, Any] = {"status": "ok", "version": torch.__version__}
    model = None
    for coarse in ("csr", "coo"):  # sparse CSR Phi with autograd on CUDA, else COO
        try:
            model = tp.TorchSchwarzBatched(op, device="cuda", dtype=tp.torch_dtype(op.dtype),
                                           coarse=coarse)
            tp.wmse_loss(model(Ft), Ut).backward()
            model.zero_grad(set_to_none=True)
            out["coarse"] = coarse
            break
        except (RuntimeError, NotImplementedError) as exc:
            out[f"{coarse}_error"] = str(exc).splitlines()[0][:200]
            model = None
    if model is None:
        out["status"] = "peer failed on CUDA"
        return out
    opt = torch.optim.AdamW(model.parameters(), lr=lr_for(op.shape[0] + 1), weight_decay=0.0)
    losses: list[Any] = []

    def run(k: int) -> None:
        for i in range(k):
            loss = tp.wmse_loss(model(Ft), Ut)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())
            if (i + 1) % log_every == 0 or i == k - 1:
                torch.stack(losses)[-1].item()
                losses.clear()

    torch.cuda.reset_peak_memory_stats()
    run(3)
    torch.cuda.synchronize()
    t = time.perf_counter()
    run(3)
    one = (time.perf_counter() - t) / 3
    k = max(1, int(min_time / 3 / max(one, 1e-6)))
    rates = []
    for _ in range(3):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        run(k)
        end.record()
        end.synchronize()
        rates.append(k / (start.elapsed_time(end) / 1e3))
    out["steps_per_s"] = float(np.median(rates))
    out["peak_bytes"] = int(torch.cuda.max_memory_allocated())
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    reason = gpu_or_reason()
    if reason is not None:
        print(f"gpu_check: skipped: {reason}")
        return 2
    import cupy

    t_start = time.perf_counter()
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    print(f"GPU: {name}, {props['totalGlobalMem'] / 2**30:.0f} GiB; cupy {cupy.__version__}, "
          f"CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}")
    report: dict[str, Any] = {"gpu": name, "cupy": cupy.__version__, "agreement": [],
                              "speed": []}
    ok = True
    for dt in ("float64", "float32"):
        a = agreement(dt)
        report["agreement"].append(a)
        ok &= a["ok"]
        print(f"agreement {dt}: " + ", ".join(
            f"{k} {a[k]:.1e}" for k in ("theta", "matvec", "rmatvec", "matmat", "loss", "grad",
                                        "train_losses"))
            + f" -> {'OK' if a['ok'] else 'FAILED'} (tol {TOL[dt]:g}, training "
              f"{TOL_TRAIN[dt]:g})", flush=True)
    for n in args.sizes:
        for dt in args.dtypes:
            try:
                row = {"n": n, "dtype": dt, **time_case(n, dt, args)}
            except Exception as exc:  # noqa: BLE001 - e.g. out of memory: report, go on
                row = {"n": n, "dtype": dt,
                       "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}
            report["speed"].append(row)
            tt = row.get("torch", {})
            print(f"n={n} {dt}: ddops {row.get('steps_per_s', float('nan')):.1f} steps/s "
                  f"({row.get('error', 'ok')}), torch {tt.get('steps_per_s', tt.get('status'))}",
                  flush=True)
    report["seconds"] = time.perf_counter() - t_start
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    print()
    print(f"log_every={args.log_every}; B={BATCH}; N=n/32, r=4, r0=N-1; "
          f"{report['seconds']:.0f} s in all")
    for a in report["agreement"]:
        print(f"agreement {a['dtype']}: max rel. difference "
              f"{max(a[k] for k in ('matvec', 'rmatvec', 'matmat', 'loss', 'grad')):.1e}, "
              f"training losses {a['train_losses']:.1e}: {'OK' if a['ok'] else 'FAILED'}")
    print(f"{'n':>8} {'dtype':>7} {'r0':>5} {'setup s':>7} {'steps/s':>8} {'no-data':>8} "
          f"{'matmat/s':>8} {'torch':>8} {'x torch':>7} {'GPU GiB':>7}")
    for row in report["speed"]:
        if "error" in row:
            print(f"{row['n']:>8} {row['dtype']:>7} ERROR {row['error']}")
            continue
        t_rate = row["torch"].get("steps_per_s")
        torch_cell = f"{t_rate:.1f}" if t_rate else str(row["torch"].get("status", "n/a"))[:8]
        ratio = f"{row['compute_steps_per_s'] / t_rate:.2f}" if t_rate else "-"
        print(f"{row['n']:>8} {row['dtype']:>7} {row['r0']:>5} {row['setup_s']:>7.1f} "
              f"{row['steps_per_s']:>8.1f} {row['compute_steps_per_s']:>8.1f} "
              f"{row['matmat_per_s']:>8.1f} {torch_cell:>8} {ratio:>7} "
              f"{row['pool_bytes'] / 2**30:>7.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
