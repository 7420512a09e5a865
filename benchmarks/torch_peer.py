"""PyTorch peers of ddops's operators, for same-process speed comparisons.

``torch`` is an optional benchmark dependency (``pip install ".[bench]"``);
nothing in ``ddops`` imports this module.

Three autograd models, all initialised by copying the factors of a ddops
operator (``op.get_params()``), so both sides start from identical parameters:

:class:`TorchSchwarzLoop`
    What a researcher writes first: a Python loop over subdomains with one
    unpadded ``nn.Parameter`` pair ``Q_i, K_i`` (``n_i x r``) per subdomain::

        x_i = D_i^{1/2} F[idx_i]                     (index_select)
        out.index_add_(0, idx_i, D_i^{1/2} Q_i (K_i^T x_i))

:class:`TorchSchwarzBatched`
    The best plain-PyTorch version: padded ``(N, p, r)`` parameters, one
    gather ``F[idx]`` into ``(N, p, B)``, two ``torch.bmm`` and one
    ``index_add_`` scatter.  The weights ``w = D^{1/2}`` are folded into the
    factors (``(w K)^T X`` and ``(w Q) T``), which costs ``N p r`` instead of
    ``N p B`` multiplications per application (``fold_weights=False`` applies
    them to the blocks, as ddops does).  Padding rows have index 0 and weight
    ``w = 0``, so they contribute nothing to ``T`` or to the scatter, the
    padding rows of ``Q`` and ``K`` (zero at the start) get exactly zero
    gradient, AdamW (``weight_decay=0``) leaves them at zero, and no mask is
    needed.

:class:`TorchGlobal`
    The global baseline ``M = Q K^T``.

Coarse space (both Schwarz peers): ``out += Phi (Q0 (K0^T (Phi^T F)))`` with
``Phi`` and ``Phi^T`` stored as ``torch.sparse_csr_tensor``.  ``Phi^T F`` needs no
gradient (``F`` is data); autograd supports CSR @ dense for the dense argument,
so ``Phi @ Z`` backpropagates ``Phi^T G`` without a custom Function.  ``Phi`` has
at most two nonzeros per row (hats) or one per subdomain holding the row (pou),
so the sparse product is O(n B) where a dense ``Phi`` costs O(n n0 B).  COO
(``torch.sparse.mm``) and dense ``Phi`` are available (``coarse="coo"`` /
``"dense"``); all three ran at the same speed within noise at n=256 and 8192
on the 2-core development machine, so the natural choice, CSR, is the default.

The training step (:func:`make_step`) is the one a user writes: forward, loss,
``backward()``, ``torch.optim.AdamW(weight_decay=0).step()``, ``zero_grad()``,
with PyTorch's default number of threads.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = [
    "TorchSchwarzLoop",
    "TorchSchwarzBatched",
    "TorchGlobal",
    "wmse_loss",
    "mse_loss",
    "LOSSES",
    "make_step",
    "grads_as_ddops",
    "params_as_ddops",
    "time_steps",
    "torch_dtype",
    "value_and_grad",
    "COARSE_FORMATS",
]

#: Floor of the weighted-MSE denominator, as ``ddops.operators.losses.WMSE_EPS``.
WMSE_EPS = 1e-30


def torch_dtype(dtype: Any) -> torch.dtype:
    """A torch dtype from a torch or numpy dtype (float32 / float64)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    return {np.dtype(np.float64): torch.float64,
            np.dtype(np.float32): torch.float32}[np.dtype(dtype)]


def _csr(A: Any, dtype: torch.dtype, device: Any) -> torch.Tensor:
    """A scipy sparse matrix as a torch CSR tensor (invariants checked once)."""
    A = A.tocsr()
    A.sort_indices()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]parse CSR tensor support.*")
        return torch.sparse_csr_tensor(
            torch.from_numpy(A.indptr.astype(np.int64)),
            torch.from_numpy(A.indices.astype(np.int64)),
            torch.from_numpy(np.asarray(A.data, dtype=np.float64)).to(dtype),
            size=A.shape, device=device, check_invariants=True,
        )


def _param(array: Any, dtype: torch.dtype, device: Any) -> nn.Parameter:
    return nn.Parameter(torch.as_tensor(np.array(array, dtype=np.float64), device=device)
                        .to(dtype).contiguous())


def _to_numpy(t: torch.Tensor | None, shape: tuple[int, ...]) -> np.ndarray:
    """A gradient (``None`` means zero, e.g. before the first backward) as numpy."""
    if t is None:
        return np.zeros(shape)
    return t.detach().cpu().numpy().copy()


#: How Phi is stored in the coarse term ``Phi @ Z``: a CSR tensor (default; the
#: gradient ``Phi^T G`` comes from autograd), a COO tensor with ``torch.sparse.mm``,
#: or a dense matrix.  They ran at the same speed within noise at n=256 and 8192.
COARSE_FORMATS = ("csr", "coo", "dense")


class _Coarse(nn.Module):
    """``Phi Q0 K0^T Phi^T`` with sparse CSR ``Phi`` and ``Phi^T`` (no-op without coarse)."""

    def __init__(self, op: Any, dtype: torch.dtype, device: Any, fmt: str = "csr") -> None:
        super().__init__()
        if fmt not in COARSE_FORMATS:
            raise ValueError(f"coarse format must be one of {COARSE_FORMATS}, got {fmt!r}")
        params = op.get_params()
        self.shape0 = tuple(params["Q0"].shape)
        self.active = op.coarse_rank > 0
        self.fmt = fmt
        if self.active:
            Phi = op.coarse_matrix
            self.Phi = _csr(Phi, dtype, device)
            self.PhiT = _csr(Phi.T, dtype, device)
            if fmt == "coo":
                self.Phi = self.Phi.to_sparse_coo().coalesce()
            elif fmt == "dense":
                self.Phi = self.Phi.to_dense()
            self.Q0 = _param(params["Q0"], dtype, device)
            self.K0 = _param(params["K0"], dtype, device)

    def add_to(self, out: torch.Tensor, F: torch.Tensor) -> torch.Tensor:
        if not self.active:
            return out
        C = self.PhiT @ F                                    # (n0, B), no grad needed
        Z = self.Q0 @ (self.K0.T @ C)
        if self.fmt == "coo":
            return out + torch.sparse.mm(self.Phi, Z)
        return out + self.Phi @ Z

    def grads(self) -> dict[str, np.ndarray]:
        if not self.active:
            return {"Q0": np.zeros(self.shape0), "K0": np.zeros(self.shape0)}
        return {"Q0": _to_numpy(self.Q0.grad, self.shape0),
                "K0": _to_numpy(self.K0.grad, self.shape0)}

    def values(self) -> dict[str, np.ndarray]:
        if not self.active:
            return {"Q0": np.zeros(self.shape0), "K0": np.zeros(self.shape0)}
        return {"Q0": _to_numpy(self.Q0, self.shape0), "K0": _to_numpy(self.K0, self.shape0)}


class TorchSchwarzLoop(nn.Module):
    """Schwarz attention as a Python loop over subdomains (unpadded parameters).

    Parameters
    ----------
    op : ddops.SchwarzOperator
        Source of the decomposition, the coarse basis and the initial factors.
    device : str or torch.device
        Where the parameters and index tensors live.
    dtype : torch.dtype or numpy dtype
        Floating-point type of parameters and products.
    coarse : {"csr", "coo", "dense"}
        Storage of ``Phi`` in the coarse term, see :data:`COARSE_FORMATS`.
    """

    def __init__(self, op: Any, device: Any = "cpu", dtype: Any = torch.float64,
                 coarse: str = "csr") -> None:
        super().__init__()
        dt = torch_dtype(dtype)
        d = op.decomposition
        params = op.get_params()
        self.n = d.num_dofs
        self.idx = [torch.as_tensor(s, dtype=torch.long, device=device) for s in d.subdomains]
        self.w = [torch.as_tensor(np.sqrt(d.weights(i)), device=device).to(dt)[:, None]
                  for i in range(d.num_subdomains)]
        self.Q = nn.ParameterList([_param(q, dt, device) for q in params["Q"]])
        self.K = nn.ParameterList([_param(k, dt, device) for k in params["K"]])
        self.coarse = _Coarse(op, dt, device, coarse)

    def forward(self, F: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(F)
        for idx, w, Q, K in zip(self.idx, self.w, self.Q, self.K, strict=True):
            x = w * F.index_select(0, idx)
            y = Q @ (K.T @ x)
            out.index_add_(0, idx, w * y)
        return self.coarse.add_to(out, F)

    def grads_as_ddops(self) -> dict[str, Any]:
        out = {"Q": [_to_numpy(q.grad, tuple(q.shape)) for q in self.Q],
               "K": [_to_numpy(k.grad, tuple(k.shape)) for k in self.K]}
        out.update(self.coarse.grads())
        return out

    def params_as_ddops(self) -> dict[str, Any]:
        out = {"Q": [_to_numpy(q, ()) for q in self.Q], "K": [_to_numpy(k, ()) for k in self.K]}
        out.update(self.coarse.values())
        return out


class TorchSchwarzBatched(nn.Module):
    """Schwarz attention batched over subdomains with padded ``(N, p, r)`` parameters.

    Parameters
    ----------
    op : ddops.SchwarzOperator
        Source of the decomposition, the coarse basis and the initial factors.
    device : str or torch.device
        Where the parameters and index tensors live.
    dtype : torch.dtype or numpy dtype
        Floating-point type of parameters and products.
    scatter : {"index_add", "sparse"}
        How ``sum_i R_i^T D_i^{1/2} Y_i`` is formed: ``index_add_`` over the
        flattened padded index, or a sparse CSR ``S^T`` (``n x N p``) matmul.
        ``index_add`` was the faster on the CPU here (see the benchmark notes).
    fold_weights : bool
        Multiply the ``(N, p, r)`` factors by ``D^{1/2}`` instead of the
        ``(N, p, B)`` blocks (faster; rounding differs from ddops in the last
        bits only).
    coarse : {"csr", "coo", "dense"}
        Storage of ``Phi`` in the coarse term, see :data:`COARSE_FORMATS`.
    """

    def __init__(self, op: Any, device: Any = "cpu", dtype: Any = torch.float64,
                 scatter: str = "index_add", fold_weights: bool = True,
                 coarse: str = "csr") -> None:
        super().__init__()
        if scatter not in ("index_add", "sparse"):
            raise ValueError(f"scatter must be 'index_add' or 'sparse', got {scatter!r}")
        dt = torch_dtype(dtype)
        d = op.decomposition
        N, p = d.num_subdomains, d.max_size
        self.n, self.N, self.p = d.num_dofs, N, p
        self.sizes = [int(s) for s in d.sizes]
        sub, pos = d.subdomain_of_entry, d.position_in_subdomain
        idx = np.zeros((N, p), dtype=np.int64)          # padding rows point at unknown 0 ...
        w = np.zeros((N, p), dtype=np.float64)          # ... with weight 0
        idx[sub, pos] = d.indices
        w[sub, pos] = d.entry_weights("sqrt")
        self.idx = torch.as_tensor(idx, device=device)
        self.idx_flat = self.idx.reshape(-1)
        self.w = torch.as_tensor(w, device=device).to(dt)[:, :, None]
        self.scatter = scatter
        self.fold_weights = fold_weights
        if scatter == "sparse":
            # unweighted: Y already carries D^{1/2}
            S = d.stacked_restriction("none", padded=True)
            self.St = _csr(S.T, dt, device)
        params = op.get_params()
        r = op.local_rank
        Qp = np.zeros((N, p, r))
        Kp = np.zeros((N, p, r))
        Qp[sub, pos] = np.concatenate(params["Q"])
        Kp[sub, pos] = np.concatenate(params["K"])
        self.Q = _param(Qp, dt, device)
        self.K = _param(Kp, dt, device)
        self.coarse = _Coarse(op, dt, device, coarse)

    def forward(self, F: torch.Tensor) -> torch.Tensor:
        N, p = self.N, self.p
        B = F.shape[1]
        if self.fold_weights:
            # D^{1/2} applied to the (N, p, r) factors instead of the (N, p, B) blocks
            X = F.index_select(0, self.idx_flat).view(N, p, B)            # (N, p, B)
            T = torch.bmm((self.w * self.K).transpose(1, 2), X)           # (N, r, B)
            Y = torch.bmm(self.w * self.Q, T)                             # (N, p, B)
        else:
            X = F.index_select(0, self.idx_flat).view(N, p, B) * self.w
            T = torch.bmm(self.K.transpose(1, 2), X)
            Y = torch.bmm(self.Q, T) * self.w
        if self.scatter == "sparse":
            out = self.St @ Y.reshape(N * p, B)
        else:
            out = torch.zeros_like(F).index_add_(0, self.idx_flat, Y.reshape(N * p, B))
        return self.coarse.add_to(out, F)

    def _unpad(self, t: torch.Tensor | None) -> list[np.ndarray]:
        full = _to_numpy(t, tuple(self.Q.shape))
        return [full[i, :s] for i, s in enumerate(self.sizes)]

    def grads_as_ddops(self) -> dict[str, Any]:
        out = {"Q": self._unpad(self.Q.grad), "K": self._unpad(self.K.grad)}
        out.update(self.coarse.grads())
        return out

    def params_as_ddops(self) -> dict[str, Any]:
        out = {"Q": self._unpad(self.Q), "K": self._unpad(self.K)}
        out.update(self.coarse.values())
        return out

    def padding_is_zero(self) -> bool:
        """Whether the padding rows of ``Q`` and ``K`` are still exactly zero."""
        mask = (self.w[:, :, 0] == 0)
        return bool((self.Q.detach()[mask] == 0).all() and (self.K.detach()[mask] == 0).all())


class TorchGlobal(nn.Module):
    """The global low-rank baseline ``M = Q K^T`` (from a ``ddops.GlobalLowRankOperator``)."""

    def __init__(self, op: Any, device: Any = "cpu", dtype: Any = torch.float64) -> None:
        super().__init__()
        dt = torch_dtype(dtype)
        params = op.get_params()
        self.Q = _param(params["Q"], dt, device)
        self.K = _param(params["K"], dt, device)

    def forward(self, F: torch.Tensor) -> torch.Tensor:
        return self.Q @ (self.K.T @ F)

    def grads_as_ddops(self) -> dict[str, Any]:
        shape = tuple(self.Q.shape)
        return {"Q": _to_numpy(self.Q.grad, shape), "K": _to_numpy(self.K.grad, shape)}

    def params_as_ddops(self) -> dict[str, Any]:
        return {"Q": _to_numpy(self.Q, ()), "K": _to_numpy(self.K, ())}


# -- losses ------------------------------------------------------------------------------
def wmse_loss(P: torch.Tensor, U: torch.Tensor, eps: float = WMSE_EPS) -> torch.Tensor:
    """``(1/B) sum_b (||P_b - U_b||^2 / n) / max(||U_b||^2 / n, eps)`` (ddops losses)."""
    n = P.shape[0]
    err = ((P - U) ** 2).sum(dim=0) / n
    denom = torch.clamp_min((U * U).sum(dim=0) / n, eps)
    return (err / denom).mean()


def mse_loss(P: torch.Tensor, U: torch.Tensor) -> torch.Tensor:
    """Mean of ``(P - U)^2`` over all entries (``torch.nn.MSELoss``)."""
    return torch.mean((P - U) ** 2)


#: Losses by the names ddops uses.
LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "wmse": wmse_loss, "mse": mse_loss}


# -- training ----------------------------------------------------------------------------
def make_step(model: nn.Module, lr: float, loss: str = "wmse",
              betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8
              ) -> Callable[[torch.Tensor, torch.Tensor], float]:
    """The full training step a user writes: forward, loss, backward, AdamW step, zero_grad.

    Returns ``step(F, U) -> float`` (the loss before the update).  ``F`` and
    ``U`` are ``(n, B)`` torch tensors of the model's dtype and device.
    The optimiser is ``torch.optim.AdamW(weight_decay=0)``, available as
    ``step.optimizer``.
    """
    loss_fn = LOSSES[loss]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=0.0)

    def step(F: torch.Tensor, U: torch.Tensor) -> float:
        value = loss_fn(model(F), U)
        value.backward()
        opt.step()
        opt.zero_grad()
        return value.item()

    step.optimizer = opt  # type: ignore[attr-defined]
    return step


def value_and_grad(model: nn.Module, F: torch.Tensor, U: torch.Tensor,
                   loss: str = "wmse") -> tuple[float, dict[str, Any]]:
    """Loss and gradients in ddops's ``get_params()`` structure (grads are reset first)."""
    model.zero_grad(set_to_none=True)
    value = LOSSES[loss](model(F), U)
    value.backward()
    return value.item(), grads_as_ddops(model)


def grads_as_ddops(model: nn.Module) -> dict[str, Any]:
    """Gradients of a peer model in ddops's ``get_params()`` structure (numpy arrays)."""
    return model.grads_as_ddops()


def params_as_ddops(model: nn.Module) -> dict[str, Any]:
    """Parameters of a peer model in ddops's ``get_params()`` structure (numpy arrays)."""
    return model.params_as_ddops()


def time_steps(step_fn: Callable[[Any, Any], Any], F: Any, U: Any, min_time: float = 1.0,
               warmup: int = 3) -> float:
    """Steps per second of ``step_fn(F, U)``: ``warmup`` calls, then repeat for ``min_time`` s."""
    for _ in range(warmup):
        step_fn(F, U)
    count = 0
    start = time.perf_counter()
    while True:
        step_fn(F, U)
        count += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return count / elapsed
