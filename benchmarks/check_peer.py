"""Check that the PyTorch peers compute what ddops computes.

Run from the repository root (torch needed)::

    python benchmarks/check_peer.py [--n 256] [--N 8] [--B 64] [--float32] [--timing]

For every combination of discretisation kind (element, dof), coarse space
(interface hats, none, partition of unity) and loss (wmse, mse) it compares the
loss and the gradients of ``ddops.SchwarzOperator`` with
:class:`TorchSchwarzLoop` and :class:`TorchSchwarzBatched`, and of
``ddops.GlobalLowRankOperator`` with :class:`TorchGlobal`.  Then it runs three
AdamW steps on both sides (``ddops.learning.optim.AdamW`` on ``op.theta`` and
``torch.optim.AdamW``, same lr, ``weight_decay=0``) and compares the losses
along the way and the final parameters.

Differences are relative, norm-wise per parameter group:
``||a - b|| / ||b||`` (lists of per-subdomain arrays are concatenated).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import ddops  # noqa: E402
from benchmarks import torch_peer as tp  # noqa: E402

try:  # ddops.learning.optim is new; the AdamW comparison is skipped when it is missing
    from ddops.learning.optim import AdamW as DdopsAdamW
except ImportError:  # pragma: no cover
    DdopsAdamW = None

KINDS = ("element", "dof")
COARSE = ("interface_hats", None, "pou")
LOSS_NAMES = ("wmse", "mse")
ADAM_STEPS = 3
LR = 1e-3


def _flat(x: Any) -> np.ndarray:
    if isinstance(x, (list, tuple)):
        return np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in x]) if x else \
            np.zeros(0)
    return np.asarray(x, dtype=np.float64).ravel()


def rel_diff(a: Any, b: Any) -> float:
    """``||a - b|| / ||b||`` (0 when both are empty or zero)."""
    a, b = _flat(a), _flat(b)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch {a.shape} vs {b.shape}")
    nb = np.linalg.norm(b)
    diff = np.linalg.norm(a - b)
    if nb == 0.0:
        return float(diff)
    return float(diff / nb)


def dict_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    if set(a) != set(b):
        raise ValueError(f"keys differ: {sorted(a)} vs {sorted(b)}")
    return max(rel_diff(a[k], b[k]) for k in b)


def _data(n: int, kind: str, B: int, dtype: Any, seed: int = 1):
    m = ddops.problems.poisson1d.num_dofs(n, kind)
    F = np.random.default_rng(seed).standard_normal((m, B))
    U = ddops.PoissonSolver(n, kind).solve(F)
    return F.astype(dtype), U.astype(dtype)


def _compare(op: Any, models: dict[str, Any], F: np.ndarray, U: np.ndarray,
             dtype: Any, tag: str, results: dict[str, float]) -> None:
    Ft, Ut = torch.from_numpy(F), torch.from_numpy(U)
    for loss in LOSS_NAMES:
        v_ref, g_ref = op.value_and_grad(F, U, loss=loss)
        for name, model in models.items():
            v, g = tp.value_and_grad(model, Ft, Ut, loss)
            results[f"{tag} {loss} {name} loss"] = abs(v - v_ref) / abs(v_ref)
            results[f"{tag} {loss} {name} grad"] = dict_diff(g, g_ref)
            model.zero_grad(set_to_none=True)


def _adam(op_factory, model_classes: dict[str, Any], F: np.ndarray, U: np.ndarray,
          dtype: Any, tag: str, results: dict[str, float], loss: str = "wmse") -> None:
    """ADAM_STEPS AdamW steps with ddops and with each torch peer; compare losses and params."""
    op = op_factory()
    models = {name: cls(op, dtype=tp.torch_dtype(dtype)) for name, cls in model_classes.items()}
    start = op.get_params()
    opt = DdopsAdamW([op.theta], lr=LR, weight_decay=0.0)
    ref_losses = []
    for _ in range(ADAM_STEPS):
        v, g = op.value_and_grad_flat(F, U, loss)
        ref_losses.append(float(v))
        opt.step([g])
    ref = op.get_params()
    delta_ref = {k: _delta(ref[k], start[k]) for k in ref}
    Ft, Ut = torch.from_numpy(F), torch.from_numpy(U)
    for name, model in models.items():
        step = tp.make_step(model, LR, loss)
        losses = [step(Ft, Ut) for _ in range(ADAM_STEPS)]
        got = tp.params_as_ddops(model)
        results[f"{tag} adamw {name} losses"] = max(
            abs(a - b) / abs(b) for a, b in zip(losses, ref_losses, strict=True))
        results[f"{tag} adamw {name} params"] = dict_diff(got, ref)
        # the update itself (theta_3 - theta_0): a stricter test than the parameters
        results[f"{tag} adamw {name} update"] = dict_diff(
            {k: _delta(got[k], start[k]) for k in got}, delta_ref)
        if isinstance(model, tp.TorchSchwarzBatched):
            assert model.padding_is_zero(), "padding rows of Q/K changed"


def _batched_alt(op: Any, dtype: Any) -> tp.TorchSchwarzBatched:
    """The batched peer's other code paths: weights on the blocks, sparse scatter, COO Phi."""
    return tp.TorchSchwarzBatched(op, dtype=dtype, scatter="sparse", fold_weights=False,
                                  coarse="coo")


def _delta(a: Any, b: Any) -> Any:
    if isinstance(a, list):
        return [x - y for x, y in zip(a, b, strict=True)]
    return a - b


def check(n: int = 256, N: int = 8, B: int = 64, dtype: Any = np.float64,
          local_rank: int = 4, global_rank: int = 16, verbose: bool = True) -> dict[str, float]:
    """Compare ddops and the torch peers; return the relative differences by case.

    Peers: ``loop`` (:class:`TorchSchwarzLoop`), ``batched``
    (:class:`TorchSchwarzBatched`, defaults), ``batched-alt`` (the batched peer
    with ``fold_weights=False, scatter="sparse", coarse="coo"``) and ``global``
    (:class:`TorchGlobal`).

    Keys are ``"<kind> <coarse|global> <loss> <peer> loss|grad"`` for the
    loss/gradient comparisons and ``"<kind> <coarse|global> adamw <peer>
    losses|params|update"`` for the AdamW runs (absent when ``ddops.learning.optim`` is
    not available).
    """
    dtype = np.dtype(dtype)
    results: dict[str, float] = {}
    peers = {"loop": tp.TorchSchwarzLoop, "batched": tp.TorchSchwarzBatched,
             "batched-alt": _batched_alt}
    for kind in KINDS:
        F, U = _data(n, kind, B, dtype)
        d = ddops.Decomposition1D(n, N, kind=kind)
        for coarse in COARSE:
            def factory(coarse=coarse, d=d):
                return ddops.SchwarzOperator(d, local_rank=local_rank, coarse_basis=coarse,
                                             dtype=dtype)
            op = factory()
            tag = f"{kind} {coarse or 'none'}"
            models = {name: cls(op, dtype=tp.torch_dtype(dtype)) for name, cls in peers.items()}
            _compare(op, models, F, U, dtype, tag, results)
            if DdopsAdamW is not None:
                _adam(factory, peers, F, U, dtype, tag, results)

        def gfactory(m=d.num_dofs):
            return ddops.GlobalLowRankOperator(m, global_rank, dtype=dtype)
        gop = gfactory()
        tag = f"{kind} global"
        _compare(gop, {"global": tp.TorchGlobal(gop, dtype=tp.torch_dtype(dtype))},
                 F, U, dtype, tag, results)
        if DdopsAdamW is not None:
            _adam(gfactory, {"global": tp.TorchGlobal}, F, U, dtype, tag, results)
    if verbose:
        width = max(len(k) for k in results)
        for key, value in results.items():
            print(f"{key:<{width}}  {value:.3e}")
        if DdopsAdamW is None:
            print("ddops.learning.optim not available: AdamW comparison skipped")
    return results


def timing(n: int, N: int, B: int, dtype: Any = np.float64, min_time: float = 2.0,
           kind: str = "element", local_rank: int = 4,
           threads: int | None = None) -> dict[str, float]:
    """Training steps per second of the torch peers (and, for reference, ddops).

    ``threads`` sets ``torch.set_num_threads`` for the measurement (restored
    afterwards); ``None`` keeps PyTorch's default.
    """
    if threads is None:
        return _timing(n, N, B, dtype, min_time, kind, local_rank)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _timing(n, N, B, dtype, min_time, kind, local_rank)
    finally:
        torch.set_num_threads(before)


def _timing(n, N, B, dtype, min_time, kind, local_rank) -> dict[str, float]:
    d = ddops.Decomposition1D(n, N, kind=kind)
    F, U = _data(n, kind, B, dtype)
    Ft, Ut = torch.from_numpy(F), torch.from_numpy(U)
    out: dict[str, float] = {}
    peers = {"torch loop": tp.TorchSchwarzLoop, "torch batched": tp.TorchSchwarzBatched}
    for name, cls in peers.items():
        op = ddops.SchwarzOperator(d, local_rank=local_rank, dtype=dtype)
        step = tp.make_step(cls(op, dtype=tp.torch_dtype(dtype)), LR)
        out[name] = tp.time_steps(step, Ft, Ut, min_time=min_time)
    if DdopsAdamW is not None:
        op = ddops.SchwarzOperator(d, local_rank=local_rank, dtype=dtype)
        opt = DdopsAdamW([op.theta], lr=LR, weight_decay=0.0)

        def ddops_step(F, U):
            v, g = op.value_and_grad_flat(F, U, "wmse")
            opt.step([g])
            return float(v)
        out["ddops"] = tp.time_steps(ddops_step, F, U, min_time=min_time)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--N", type=int, default=8)
    parser.add_argument("--B", type=int, default=64)
    parser.add_argument("--float32", action="store_true")
    parser.add_argument("--timing", action="store_true",
                        help="also time the peers at n=256 N=8 and n=8192 N=256, B=256")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads for --timing (default: PyTorch's default)")
    args = parser.parse_args(argv)
    dtype = np.float32 if args.float32 else np.float64
    results = check(args.n, args.N, args.B, dtype)
    tol = 1e-10 if dtype == np.float64 else 1e-4
    worst = max(results, key=results.get)
    print(f"max relative difference {results[worst]:.3e} ({worst}); tolerance {tol:g}")
    failed = [k for k, v in results.items() if not v < tol]
    for key in failed:
        print(f"FAILED: {key}: {results[key]:.3e}")
    ok = not failed
    print("OK: ddops and the torch peers agree" if ok else f"{len(failed)} comparisons failed")
    if args.timing:
        threads = torch.get_num_threads() if args.threads is None else args.threads
        print(f"torch {torch.__version__}, {threads} threads")
        for n, N in ((256, 8), (8192, 256)):
            steps = timing(n, N, 256, dtype, threads=args.threads)
            print(f"n={n} N={N} B=256: " + ", ".join(f"{k} {v:.1f} steps/s"
                                                    for k, v in steps.items()))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
