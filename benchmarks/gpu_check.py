"""Check and time the CuPy path of ddops on a GPU, against the CPU and a PyTorch CUDA peer.

Run from the repository root on a machine with CuPy and a GPU (torch with
CUDA optional)::

    python benchmarks/gpu_check.py                 # everything (--max-seconds 240 bounds it)
    python benchmarks/gpu_check.py --quick         # agreement, n = 8192, 32768, small Krylov
    python benchmarks/gpu_check.py --cpu           # the same code paths with numpy, tiny sizes
    python benchmarks/gpu_check.py --sections speed --sizes 1048576 --dtypes float32

Everything goes to one JSON file (``--json``, default ``results/gpu_check.json``),
rewritten after every section and case, so a run cut short keeps what it measured.

1. **Agreement** (float64 and float32): every public object with a
   ``backend=`` argument, built on the device and on the host from the same
   seeds and fed the same inputs, relative differences against tolerances
   (1e-9 / 1e-3; training histories 1e-8 / 1e-3):
   ``SchwarzOperator`` (products, adjoint, parts, ``to_dense``, the losses
   ``wmse``, ``mse`` and ``energy`` with their gradients, reused training
   buffers, parameters, save/load; variants: every coarse basis and
   partition the library lists, a custom matrix, none, a truncated coarse
   rank, tied, a fixed matrix or operator ``base``, the ``naive``
   initialisation, a ``dof`` and an irregular decomposition, METIS parts of a
   2D grid in three padding groups with GDSW built from ``A``, RGDSW on
   boxes),
   ``GlobalLowRankOperator``, the losses, ``Adam``/``AdamW`` (with a state
   round trip) and ``ReduceLROnPlateau``, ``FourierRHS`` (every mode and
   kind, ``out=``, ``synthesize``), ``GridFourierRHS`` and ``MatrixRHS``
   (eigenvectors, smoothed vectors), ``PreconditionerSampler`` (every
   distribution), the stacked restrictions, ``spmm`` and ``take_rows``,
   ``Trainer`` (history, ``log_every``, validation, checkpoint and resume, a
   float64 sampler for a float32 operator, the energy loss; ``workers > 1``
   must be refused on the GPU), ``TwoLevelSchwarz`` (``update`` and ``options=`` too; every
   variant and coarse
   basis, float32 local factors) and ``jacobi``, CG and GMRES of the device's Krylov module with
   them (additive and symmetric restricted in CG, RAS in GMRES), and the
   learned preconditioner (every base and initialisation, ``classical_init``,
   ``preconditioner_objective``, ``cg_iterations``, ``train_preconditioner``
   with both objectives, the trained operator in the device's CG), and 2D
   problems (Poisson, high-contrast channels) on box, RCB and (with pymetis)
   METIS decompositions, with the ``pou``, GDSW, RGDSW and Nicolaides coarse
   spaces.  A group that raises is recorded as failed with the exception
   and the line, and the next group runs.
2. **Speed** (``n = 8192 ... 1048576``, ``N = n/32``, ``r = 4``,
   ``r0 = min(N - 1, 4095)``, ``B = 256``, float32 and float64): full
   training steps/s with ``Trainer(TrainingConfig(log_every=50))``, the step
   without data generation (``value_and_grad_flat`` + AdamW on a fixed
   batch, the loss fetched every 50 steps), ``matmat``/s, the same step for
   the tied operator, for the energy loss and for ``GlobalLowRankOperator``
   (rank 32), and the PyTorch peers (``TorchSchwarzBatched``,
   ``TorchGlobal``) on ``device="cuda"`` with ``torch.optim.AdamW`` on the
   same batch, their losses also fetched every 50 steps, after checking that
   each peer's loss and gradient equal ddops's.  CUDA events around whole
   chunks of steps.  The host-issue fraction (host time to issue 10 steps
   over the time until their losses arrive) shows whether anything but the
   logged loss waits for the device: well below 1 at large n when nothing does.
3. **Krylov** (float64): the 1D problem at ``n = 8192, 131072`` (``N =
   min(n/32, 4096)``, interface hats) and 2D Poisson on 256 x 256 points
   (32 x 32 boxes, overlap 1, ``pou`` coarse space): the two-level Schwarz
   preconditioner inside ``cupyx.scipy.sparse.linalg.cg`` (additive and
   symmetric restricted), RAS inside its ``gmres`` and the learned
   preconditioner with the classical initialisation (which is two-level
   additive Schwarz) inside its ``cg``, and on the 2D problem two-level
   additive Schwarz with the GDSW and RGDSW coarse spaces: set-up (local and
   coarse parts) and solve seconds, iterations, true residual, against
   scipy's solvers with the host preconditioners in the same run; then the
   learned preconditioner's training steps/s with the energy loss (full
   ``Trainer`` with ``PreconditionerSampler``, which draws on the host, and
   the step without data generation).
4. **Targets**: 5000 steps/s at n = 8192 (float32), time per step linear
   in n (fitted exponent), at least 1.5x the PyTorch peer, agreement, and
   no host round trip per step (host-issue fraction below 0.5 at the largest
   n), each ``MET`` / ``NOT MET`` with its number.

``--cpu`` runs all of it with numpy as the "device" side and torch on the
CPU, at tiny sizes: a check that the script and the paths it drives work,
not a measurement (the two sides then agree trivially).

Exit status 0 when every agreement check passes, 1 when one fails, 2 (with
one line) when CuPy or a GPU is missing.  The timing targets never change the
exit status.
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy
import scipy.sparse as sp
import scipy.sparse.linalg as spla

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ddops  # noqa: E402
from ddops.backend import asarray, get_sparse_module, spmm, take_rows, to_numpy  # noqa: E402
from ddops.dd.adaptive import agdsw_basis, geneo_basis  # noqa: E402
from ddops.dd.coarse import COARSE_BASES  # noqa: E402
from ddops.dd.decomposition import WEIGHTINGS, Decomposition, Decomposition1D  # noqa: E402
from ddops.dd.gdsw import GDSW_VARIANTS, gdsw_basis, nicolaides_basis  # noqa: E402
from ddops.dd.partition import decomposition_from_grid, decomposition_from_matrix  # noqa: E402
from ddops.io import atomic_write_json, load_operator, save_operator  # noqa: E402
from ddops.learning.data import RHS_MODES, FourierRHS, GridFourierRHS, MatrixRHS  # noqa: E402
from ddops.learning.optim import Adam, AdamW, ReduceLROnPlateau  # noqa: E402
from ddops.learning.training import Trainer, TrainingConfig  # noqa: E402
from ddops.operators import PARTITIONS, GlobalLowRankOperator, SchwarzOperator  # noqa: E402
from ddops.operators.losses import LOSSES, loss_and_grad, loss_value  # noqa: E402
from ddops.precond.learned import (  # noqa: E402
    BASES,
    DISTRIBUTIONS,
    LEARNED_INITS,
    OBJECTIVES,
    PreconditionerSampler,
    cg_iterations,
    classical_init,
    learned_schwarz_preconditioner,
    parameter_scale,
    preconditioner_objective,
    train_preconditioner,
)
from ddops.precond.options import SchwarzOptions  # noqa: E402
from ddops.precond.schwarz import VARIANTS, TwoLevelSchwarz, jacobi  # noqa: E402
from ddops.problems import diffusion_2d, high_contrast_channels, poisson_2d  # noqa: E402
from ddops.problems.poisson1d import KINDS, poisson_1d  # noqa: E402

SIZES = (8192, 32768, 131072, 262144, 524288, 1048576)
QUICK_SIZES = (8192, 32768)
CPU_SIZES = (256, 1024)
KRYLOV_SIZES = (8192, 131072)
QUICK_KRYLOV_SIZES = (8192,)
CPU_KRYLOV_SIZES = (256,)
KRYLOV_2D = (256, 32)  # 2D Poisson: grid points and boxes per direction (65536 unknowns)
# Above this n (only with --krylov-sizes) just two-level additive Schwarz and the learned
# preconditioner are solved: backend="cupy" factorises on the host and ships dense inverses,
# and N = 4096 dense local inverses of 260 unknowns (n = 1048576) take minutes to set up.
KRYLOV_ALL_SOLVERS_MAX_N = 131072
CPU_KRYLOV_2D = (16, 4)
KRYLOV_MAX_SUBDOMAINS = 4096  # n0 = 4095: A_0^{-1} is shipped dense to the GPU
KRYLOV_TRAINER_MAX_N = 131072  # PreconditionerSampler draws and solves on the host
DTYPES = ("float32", "float64")
SECTIONS = ("agreement", "speed", "krylov")
BATCH = 256
KRYLOV_BATCH = 32
GLOBAL_RANK = 32
ISSUE_STEPS = 10
LR = 1e-3  # the agreement runs (n = 1024)
TOL = {"float64": 1e-9, "float32": 1e-3}
TOL_TRAIN = {"float64": 1e-8, "float32": 1e-3}
KRYLOV_RTOL = {"float64": 1e-8, "float32": 1e-3}
TARGET_STEPS_8192 = 5000.0
TARGET_PEER_RATIO = 1.5
TARGET_EXPONENT = 1.1
TARGET_ISSUE_FRACTION = 0.5


def lr_for(n: int) -> float:
    """As ``benchmarks/run.py``: 1e-3 at n = 256, scaled by 256 / n above (speed-neutral)."""
    return 1e-3 * min(1.0, 256 / n)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="agreement, the two smallest sizes and Krylov at n = 8192")
    p.add_argument("--cpu", action="store_true",
                   help="numpy as the device side, torch on the CPU, tiny sizes (a dry run)")
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    p.add_argument("--sizes", type=int, nargs="+", default=None)
    p.add_argument("--krylov-sizes", type=int, nargs="+", default=None)
    p.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    p.add_argument("--log-every", type=int, default=50,
                   help="fetch the loss from the device every this many steps (default 50)")
    p.add_argument("--min-time", type=float, default=None,
                   help="seconds per timed measurement (default 1; 0.05 with --cpu)")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch peers")
    p.add_argument("--max-coarse-rank", type=int, default=4095,
                   help="cap of r0 = N - 1 (default 4095; 0: no cap). Q0, K0 are n0 x r0 "
                        "dense: uncapped, n = 1048576 has 2.1e9 coarse parameters")
    p.add_argument("--max-seconds", type=float, default=240.0,
                   help="start no further Krylov or speed case after this many seconds "
                        "(default 240)")
    p.add_argument("--json", metavar="PATH", default="results/gpu_check.json")
    args = p.parse_args(argv)
    if args.sizes is None:
        args.sizes = list(CPU_SIZES if args.cpu else QUICK_SIZES if args.quick else SIZES)
    if args.krylov_sizes is None:
        args.krylov_sizes = list(CPU_KRYLOV_SIZES if args.cpu else
                                 QUICK_KRYLOV_SIZES if args.quick else KRYLOV_SIZES)
    if args.min_time is None:
        args.min_time = 0.05 if args.cpu else 1.0
    for n in args.sizes + args.krylov_sizes:
        if n < 64:
            p.error(f"--sizes/--krylov-sizes: n must be >= 64 (two subdomains of 32), got {n}")
    if not args.min_time > 0:
        p.error(f"--min-time must be > 0, got {args.min_time}")
    if args.log_every < 1:
        p.error(f"--log-every must be >= 1, got {args.log_every}")
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
    if not ddops.cupy_available():
        return "ddops.backend.cupy_available() is False"
    return None


# -- the side under test -----------------------------------------------------------------------
class Device:
    """The side under test: CuPy on the GPU, or numpy (``--cpu``), with its sparse modules."""

    def __init__(self, cpu: bool) -> None:
        self.cpu = cpu
        if cpu:
            self.backend, self.xp = "numpy", np
            self.linalg = spla
            self.torch_device = "cpu"
        else:
            import cupy
            import cupyx.scipy.sparse.linalg as linalg

            self.backend, self.xp = "cupy", cupy
            self.linalg = linalg
            self.torch_device = "cuda"
        self.sparse = get_sparse_module(self.backend)

    def asarray(self, x: Any, dtype: Any = None) -> Any:
        """A scipy sparse matrix (as CSR) or a copy of a dense array on this side.

        Dense arrays are always copied, as a host-to-device transfer does, so
        that the two sides never share memory with ``--cpu`` either.
        """
        if sp.issparse(x):
            return asarray(x, backend=self.backend, dtype=dtype)
        return self.xp.array(to_numpy(x), dtype=dtype, copy=True)

    def synchronize(self) -> None:
        if not self.cpu:
            self.xp.cuda.Device().synchronize()

    def seconds(self, fn: Callable[[], Any]) -> float:
        """Seconds of ``fn()``: CUDA events on the current stream, or the wall clock."""
        if self.cpu:
            t = time.perf_counter()
            fn()
            return time.perf_counter() - t
        start, end = self.xp.cuda.Event(), self.xp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return self.xp.cuda.get_elapsed_time(start, end) / 1e3

    def free(self) -> None:
        if not self.cpu:
            self.xp.get_default_memory_pool().free_all_blocks()

    def pool_bytes(self) -> int:
        return 0 if self.cpu else int(self.xp.get_default_memory_pool().total_bytes())

    def solve(self, method: str, A: Any, b: Any, M: Any, rtol: float, maxiter: int,
              restart: int = 30) -> tuple[Any, int, int]:
        """CG or GMRES of this side's Krylov module: ``(x, info, callbacks)``.

        CG calls back once per iteration on both sides; GMRES once per inner
        iteration in scipy but once per restart cycle in cupyx, so only CG
        counts are compared.  ``maxiter`` counts CG iterations or GMRES cycles.
        """
        return krylov_solve(self.linalg, method, A, b, M, rtol, maxiter, restart)

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"backend": self.backend, "numpy": np.__version__,
                                "scipy": scipy.__version__, "python": platform.python_version(),
                                "ddops": ddops.__version__, "cpus": os.cpu_count(),
                                "git": git_revision()}
        try:
            import torch

            info["torch"] = torch.__version__
            info["torch_cuda"] = torch.version.cuda
        except ImportError:
            info["torch"] = None
        if self.cpu:
            info["device"] = f"CPU ({platform.processor() or platform.machine()}), --cpu dry run"
            return info
        cupy = self.xp
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        info.update(device=name, memory_gib=props["totalGlobalMem"] / 2**30,
                    compute_capability=f"{props.get('major', '?')}.{props.get('minor', '?')}",
                    cupy=cupy.__version__,
                    cuda_runtime=cupy.cuda.runtime.runtimeGetVersion(),
                    cuda_driver=cupy.cuda.runtime.driverGetVersion(),
                    cupy_tf32=os.environ.get("CUPY_TF32"))
        return info


def krylov_solve(linalg: Any, method: str, A: Any, b: Any, M: Any, rtol: float, maxiter: int,
                 restart: int = 30) -> tuple[Any, int, int]:
    """``linalg.cg``/``gmres``, the tolerance under its name (cupyx: ``tol``, scipy: ``rtol``)."""
    fn = getattr(linalg, method)
    params = inspect.signature(fn).parameters
    calls = [0]

    def callback(_: Any) -> None:
        calls[0] += 1

    kwargs: dict[str, Any] = {"rtol" if "rtol" in params else "tol": rtol, "M": M,
                              "callback": callback}
    if method == "gmres":
        kwargs.update(restart=restart, callback_type="pr_norm")
        # scipy counts restart cycles, cupyx inner iterations
        kwargs["maxiter"] = maxiter if linalg is spla else maxiter * restart
    else:
        kwargs["maxiter"] = maxiter
    x, info = fn(A, b, **kwargs)
    return x, int(info), calls[0]


def git_revision() -> str | None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        out = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def rel(a: Any, b: Any) -> float:
    """``||a - b|| / ||b||`` on the host, in float64."""
    a = np.asarray(to_numpy(a), dtype=np.float64).ravel()
    b = np.asarray(to_numpy(b), dtype=np.float64).ravel()
    if a.shape != b.shape:
        return math.inf
    nb = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / (nb if nb > 0 else 1.0))


def flat(params: dict[str, Any]) -> np.ndarray:
    """A ``get_params()``-structured dict (arrays or lists of arrays) as one host vector."""
    parts: list[np.ndarray] = []
    for key in sorted(params):
        value = params[key]
        for x in value if isinstance(value, (list, tuple)) else [value]:
            parts.append(np.ravel(to_numpy(x)).astype(np.float64))
    return np.concatenate(parts)


def both(make: Callable[[str], Any], dev: Device) -> tuple[Any, Any]:
    """``(make("numpy"), make(device backend))``."""
    return make("numpy"), make(dev.backend)


class Checks:
    """Named measurements against tolerances; a group that raises counts as failed."""

    def __init__(self, dtype_name: str) -> None:
        self.dtype = dtype_name
        self.tol = TOL[dtype_name]
        self.tol_train = TOL_TRAIN[dtype_name]
        self.rows: dict[str, dict[str, Any]] = {}
        self.seconds: dict[str, float] = {}

    def value(self, name: str, value: float, tol: float) -> None:
        value = float(value)
        self.rows[name] = {"value": value, "tol": float(tol), "ok": bool(value <= tol)}

    def rel(self, name: str, a: Any, b: Any, tol: float | None = None) -> None:
        self.value(name, rel(a, b), self.tol if tol is None else tol)

    def flag(self, name: str, ok: bool, detail: Any = "") -> None:
        self.rows[name] = {"value": None, "tol": None, "ok": bool(ok), "detail": str(detail)[:300]}

    def group(self, name: str, fn: Callable[[], None]) -> None:
        t = time.perf_counter()
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - record, go on with the next group
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            where = f"{os.path.basename(frame.filename)}:{frame.lineno}: {frame.line}"
            self.flag(f"{name}.error", False,
                      f"{type(exc).__name__}: {exc}".splitlines()[0][:200] + f" [{where}]")
        self.seconds[name] = time.perf_counter() - t

    def failed(self) -> list[str]:
        return [k for k, r in self.rows.items() if not r["ok"]]


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


# -- 1. agreement ------------------------------------------------------------------------------
def check_schwarz(dev: Device, dt: np.dtype, c: Checks) -> None:
    """The default operator: products, losses, gradients, parts, parameters, files."""
    n, B = 1024, 64
    d = Decomposition1D(n, n // 32, overlap=2, kind="element")
    h, g = both(lambda b: SchwarzOperator(d, local_rank=4, seed=0, dtype=dt, backend=b), dev)
    F, U = FourierRHS(n, dtype=dt).sample(B, _rng(5))
    Fd, Ud = dev.asarray(F), dev.asarray(U)
    c.rel("schwarz.theta", g.theta, h.theta)
    c.rel("schwarz.matvec", g.matvec(Fd[:, 0]), h.matvec(F[:, 0]))
    c.rel("schwarz.rmatvec", g.rmatvec(Fd[:, 0]), h.rmatvec(F[:, 0]))
    c.rel("schwarz.matmat", g.matmat(Fd), h.matmat(F))
    c.rel("schwarz.rmatmat", g.rmatmat(Fd), h.rmatmat(F))
    c.rel("schwarz.adjoint_operator", g.H.matvec(Fd[:, 1]), h.rmatvec(F[:, 1]))
    c.rel("schwarz.host_input", g.matmat(F), h.matmat(F))
    c.flag("schwarz.returns_device_array", isinstance(g.matmat(F), dev.xp.ndarray),
           type(g.matmat(F)).__name__)
    A = poisson_1d(n).astype(dt)
    grads = {}
    for loss in LOSSES:
        wh, wd = (A, dev.asarray(A)) if loss == "energy" else (None, None)
        vh, grads[loss] = h.value_and_grad_flat(F, U, loss, loss_weight=wh)
        vd, gd = g.value_and_grad_flat(Fd, Ud, loss, loss_weight=wd)
        c.rel(f"schwarz.{loss}.loss", vd, vh)
        c.rel(f"schwarz.{loss}.grad", gd, grads[loss])
    out = dev.xp.empty_like(g.theta)  # the training path: reused workspace, no input checks
    for _ in range(2):
        _, gd = g.value_and_grad_flat(Fd, Ud, "wmse", out=out, check=False)
    c.flag("schwarz.grad_into_out", gd is out)
    c.rel("schwarz.grad_reused_buffers", out, grads["wmse"])
    _, gs = g.value_and_grad(Fd, Ud, "wmse")
    _, hs = h.value_and_grad(F, U, "wmse")
    c.rel("schwarz.value_and_grad", flat(gs), flat(hs))
    for part in ("local", "coarse"):
        c.rel(f"schwarz.{part}_part", getattr(g, f"{part}_part")().matvec(Fd[:, 2]),
              getattr(h, f"{part}_part")().matvec(F[:, 2]))
        c.rel(f"schwarz.to_dense.{part}", g.to_dense(part), h.to_dense(part))
    c.rel("schwarz.to_dense", g.to_dense(), h.to_dense())
    rng = _rng(6)
    params = h.get_params()
    params = {k: ([x + 0.01 * rng.standard_normal(x.shape) for x in v] if isinstance(v, list)
                  else v + 0.01 * rng.standard_normal(v.shape)) for k, v in params.items()}
    h.set_params(params)
    g.set_params(params)
    c.rel("schwarz.set_params", g.theta, h.theta)
    c.rel("schwarz.get_params", flat(g.get_params()), flat(h.get_params()))
    c.rel("schwarz.flatten", g.flatten(params), h.flatten(params))
    c.rel("schwarz.unflatten", flat(g.unflatten(g.theta)), flat(h.get_params()))
    with tempfile.TemporaryDirectory() as tmp:
        path = save_operator(g, os.path.join(tmp, "op.npz"))
        c.rel("io.load_on_device", load_operator(path, backend=dev.backend).matmat(Fd),
              h.matmat(F))
        c.rel("io.load_on_host", load_operator(path).theta, h.theta)


def check_variants(dev: Device, dt: np.dtype, c: Checks) -> None:
    """Coarse bases, partitions, tied, bases, initialisations and decompositions."""
    n, B = 256, 16
    d = Decomposition1D(n, 8, overlap=2, kind="element")
    m = d.num_dofs
    A = poisson_1d(n)
    phi = sp.random(m, 5, density=0.2, random_state=2, format="csr") + sp.eye(m, 5)
    irregular = Decomposition([np.arange(0, 70), np.arange(60, 140), np.arange(130, m)], m)
    A2 = poisson_2d(16)
    metis2d = decomposition_from_matrix(A2, 12, overlap=1)
    boxes2d = decomposition_from_grid((16, 16), (4, 4), overlap=1)
    # every coarse basis and partition the library knows, then the other options
    variants: dict[str, Callable[[str], dict[str, Any]]] = {
        f"coarse_{name}": lambda b, name=name: {"coarse_basis": name} for name in COARSE_BASES}
    variants.update({f"partition_{name}": lambda b, name=name: {"partition": name}
                     for name in PARTITIONS})
    variants.update({
        "grid_hats_size_5": lambda b: {"coarse_basis": "grid_hats", "coarse_size": 5},
        "custom_phi": lambda b: {"coarse_basis": phi},
        "one_level": lambda b: {"coarse_basis": None},
        "coarse_rank_3": lambda b: {"coarse_rank": 3},
        "tied": lambda b: {"tied": True},
        "tied_partition_none": lambda b: {"tied": True, "partition": "none"},
        "init_naive": lambda b: {"init": "naive"},
        "base_matrix": lambda b: {"base": sp.identity(m, format="csr") * 0.5},
        "base_operator": lambda b: {"tied": True, "base": TwoLevelSchwarz(
            A, d, coarse=False, local_solver="dense", dtype=dt, backend=b)},
        "dof_kind": lambda b: {"decomposition": Decomposition1D(n, 8, overlap=3, kind="dof")},
        "irregular_decomposition": lambda b: {"decomposition": irregular, "coarse_basis": "pou"},
        # 2D: METIS parts of uneven size in three padded groups, GDSW and RGDSW built from A
        "grid2d_gdsw_padding_groups": lambda b: {"decomposition": metis2d, "coarse_basis": "gdsw",
                                                 "A": A2, "padding_groups": 3},
        "grid2d_rgdsw_boxes": lambda b: {"decomposition": boxes2d, "coarse_basis": "rgdsw",
                                         "A": A2},
    })
    for name, spec in variants.items():
        def make(b: str, spec=spec) -> SchwarzOperator:
            kw = spec(b)
            deco = kw.pop("decomposition", d)
            return SchwarzOperator(deco, local_rank=3, seed=1, dtype=dt, backend=b, **kw)

        h, g = both(make, dev)
        rng = _rng(len(name))
        X = rng.standard_normal((h.shape[0], B)).astype(dt)
        Y = rng.standard_normal((h.shape[0], B)).astype(dt)
        vh, gh = h.value_and_grad_flat(X, Y, "wmse")
        vd, gd = g.value_and_grad_flat(dev.asarray(X), dev.asarray(Y), "wmse")
        c.value(f"variant.{name}", max(rel(g.theta, h.theta),
                                       rel(g.matmat(dev.asarray(X)), h.matmat(X)),
                                       rel(g.rmatmat(dev.asarray(X)), h.rmatmat(X)),
                                       rel(vd, vh), rel(gd, gh)), c.tol)


def check_global(dev: Device, dt: np.dtype, c: Checks) -> None:
    """``GlobalLowRankOperator``: products, the three losses, parameters, training."""
    n, B = 1024, 64
    m = n - 1
    h, g = both(lambda b: GlobalLowRankOperator(m, 8, seed=3, dtype=dt, backend=b), dev)
    F, U = FourierRHS(n, dtype=dt).sample(B, _rng(5))
    Fd, Ud = dev.asarray(F), dev.asarray(U)
    c.rel("global.theta", g.theta, h.theta)
    c.rel("global.matvec", g.matvec(Fd[:, 0]), h.matvec(F[:, 0]))
    c.rel("global.matmat", g.matmat(Fd), h.matmat(F))
    c.rel("global.rmatmat", g.rmatmat(Fd), h.rmatmat(F))
    c.rel("global.to_dense", g.to_dense(), h.to_dense())
    A = poisson_1d(n).astype(dt)
    for loss in LOSSES:
        wh, wd = (A, dev.asarray(A)) if loss == "energy" else (None, None)
        vh, gh = h.value_and_grad_flat(F, U, loss, loss_weight=wh)
        vd, gd = g.value_and_grad_flat(Fd, Ud, loss, loss_weight=wd)
        c.value(f"global.{loss}", max(rel(vd, vh), rel(gd, gh)), c.tol)
    params = {k: v * 1.5 for k, v in h.get_params().items()}
    h.set_params(params)
    g.set_params(params)
    c.rel("global.set_params", g.theta, h.theta)
    hist = {}
    for side, b in (("host", "numpy"), ("device", dev.backend)):
        op = GlobalLowRankOperator(m, 8, seed=3, dtype=dt, backend=b)
        cfg = TrainingConfig(steps=10, batch_size=32, lr=LR, progress=False, val_every=10**9,
                             log_every=5 if side == "device" else 1)
        hist[side] = Trainer(op, FourierRHS(n, dtype=dt, backend=b), cfg,
                             train_seed=3).run().history["train"]
    c.rel("global.trainer_history", hist["device"], hist["host"], c.tol_train)


def check_losses(dev: Device, dt: np.dtype, c: Checks) -> None:
    """``loss_and_grad`` and ``loss_value`` on device arrays, including the energy weight."""
    rng = _rng(8)
    P = rng.standard_normal((300, 20)).astype(dt)
    U = rng.standard_normal((300, 20)).astype(dt)
    W = poisson_1d(301).astype(dt)
    for name in LOSSES:
        wh, wd = (W, dev.asarray(W)) if name == "energy" else (None, None)
        Pd, Ud = dev.asarray(P), dev.asarray(U)
        vh, gh = loss_and_grad(name, P, U, weight=wh)
        vd, gd = loss_and_grad(name, Pd, Ud, weight=wd)
        c.value(f"loss.{name}", max(rel(vd, vh), rel(gd, gh)), c.tol)
        buf = dev.xp.empty_like(Pd)
        _, go = loss_and_grad(name, Pd, Ud, out=buf, weight=wd)
        c.flag(f"loss.{name}.into_out", go is buf)
        c.rel(f"loss.{name}.out", buf, gh)
        c.rel(f"loss.{name}.value", loss_value(name, Pd, Ud, weight=wd), vh)
        c.value(f"loss.{name}.inputs_unchanged", max(rel(Pd, P), rel(Ud, U)), 0.0)


def check_optim(dev: Device, dt: np.dtype, c: Checks) -> None:
    """Adam/AdamW steps and a state round trip on device arrays; the plateau scheduler."""
    rng = _rng(9)
    p0 = rng.standard_normal(500).astype(dt)
    grads = [rng.standard_normal(500).astype(dt) for _ in range(6)]
    for label, cls, kw in (("adam", Adam, {}), ("adam_l2", Adam, {"weight_decay": 0.01}),
                           ("adamw", AdamW, {"weight_decay": 0.01})):
        ph, pd = p0.copy(), dev.asarray(p0)
        oh, od = cls([ph], lr=1e-2, **kw), cls([pd], lr=1e-2, **kw)
        for grad in grads[:3]:
            oh.step([grad])
            od.step([dev.asarray(grad)])
        resumed = dev.asarray(to_numpy(pd))
        fresh = cls([resumed], lr=1.0, **kw)
        fresh.load_state_dict(od.state_dict())
        for grad in grads[3:]:
            oh.step([grad])
            od.step([dev.asarray(grad)])
            fresh.step([dev.asarray(grad)])
        c.rel(f"optim.{label}", pd, ph)
        c.rel(f"optim.{label}.resumed", resumed, ph)
    lrs = {}
    for side, wrap in (("host", float), ("device", lambda v: dev.xp.asarray(v, dtype=dt))):
        opt = AdamW([dev.asarray(p0) if side == "device" else p0.copy()], lr=1.0)
        sched = ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=1)
        seq = []
        for v in (1.0, 0.9, 0.95, 0.97, 0.99, 0.5, 0.6, 0.7, 0.8):
            sched.step(wrap(v))
            seq.append(opt.lr)
        lrs[side] = seq
    c.value("optim.plateau_scheduler", rel(lrs["device"], lrs["host"]), 0.0)


def check_data(dev: Device, dt: np.dtype, c: Checks) -> None:
    """``FourierRHS`` (modes, kinds, ``out=``, ``synthesize``) and ``PreconditionerSampler``."""
    for kind in KINDS:
        for mode in RHS_MODES:
            h, g = both(lambda b, mode=mode, kind=kind: FourierRHS(
                128, kind=kind, mode=mode, dtype=dt, backend=b), dev)
            Fh, Uh = h.sample(32, _rng(9))
            Fd, Ud = g.sample(32, _rng(9))
            c.flag(f"rhs.{kind}.{mode}.device_array",
                   isinstance(Fd, dev.xp.ndarray) and Fd.dtype == dt, type(Fd).__name__)
            c.value(f"rhs.{kind}.{mode}", max(rel(Fd, Fh), rel(Ud, Uh)), c.tol)
    h, g = both(lambda b: FourierRHS(128, dtype=dt, backend=b), dev)
    Fh, Uh = h.sample(32, _rng(10))
    buffers = (dev.xp.empty_like(dev.asarray(Fh)), dev.xp.empty_like(dev.asarray(Uh)))
    Fo, Uo = g.sample(32, _rng(10), out=buffers)
    c.flag("rhs.out_buffers", Fo is buffers[0] and Uo is buffers[1])
    c.value("rhs.out", max(rel(Fo, Fh), rel(Uo, Uh)), c.tol)
    C = h.sample_coefficients(32, _rng(11))
    (Fs, Us), (Fsd, Usd) = h.synthesize(C), g.synthesize(C[:, 3:20])
    c.value("rhs.synthesize", max(rel(Fsd, Fs[:, 3:20]), rel(Usd, Us[:, 3:20])), c.tol)
    # the general samplers: tensor-product Fourier modes on a 2D grid, eigenvectors and
    # smoothed vectors of any SPD matrix (same host coefficients, device GEMMs)
    A2 = poisson_2d(16)
    samplers = {
        "grid_fourier_2d": lambda b: GridFourierRHS(A2, (16, 16), modes=4, dtype=dt, backend=b),
        "matrix_eigen": lambda b: MatrixRHS(A2, size=24, basis="eigen", dtype=dt, backend=b),
        "matrix_smooth": lambda b: MatrixRHS(A2, size=24, basis="smooth", dtype=dt, backend=b),
    }
    for name, make_sampler in samplers.items():
        h, g = both(make_sampler, dev)
        Fh, Uh = h.sample(32, _rng(13))
        Fd, Ud = g.sample(32, _rng(13))
        c.flag(f"rhs.{name}.device_array", isinstance(Fd, dev.xp.ndarray) and Fd.dtype == dt,
               type(Fd).__name__)
        c.value(f"rhs.{name}", max(rel(Fd, Fh), rel(Ud, Uh)), c.tol)
    A = poisson_1d(256)
    for dist in DISTRIBUTIONS:
        h, g = both(lambda b, dist=dist: PreconditionerSampler(A, dist, dtype=dt, backend=b), dev)
        Fh, Uh = h.sample(16, _rng(12))
        Fd, Ud = g.sample(16, _rng(12))
        c.value(f"precond_sampler.{dist}", max(rel(Fd, Fh), rel(Ud, Uh)), c.tol)


def check_helpers(dev: Device, dt: np.dtype, c: Checks) -> None:
    """Stacked restrictions, ``spmm`` (with ``out``, accumulation, no entries), ``take_rows``."""
    d = Decomposition1D(256, 8, overlap=2)
    rng = _rng(13)
    X = rng.standard_normal((d.num_dofs, 7)).astype(dt)
    Xd = dev.asarray(X)
    for weighting in WEIGHTINGS:
        for padded in (True, False):
            Sh = d.stacked_restriction(weighting, padded=padded, dtype=dt)
            Sd = d.stacked_restriction(weighting, padded=padded, dtype=dt, backend=dev.backend)
            c.rel(f"restriction.{weighting}.{'padded' if padded else 'packed'}", Sd @ Xd, Sh @ X)
    A = sp.random(50, 40, density=0.1, random_state=3, format="csr", dtype=dt)
    Y = rng.standard_normal((40, 6)).astype(dt)
    Ad, Yd = dev.asarray(A), dev.asarray(Y)
    ref = A @ Y
    c.rel("spmm", spmm(Ad, Yd), ref)
    out = dev.xp.ones((50, 6), dtype=dt)
    spmm(Ad, Yd, out)
    c.rel("spmm.out", out, ref)
    spmm(Ad, Yd, out, accumulate=True)
    c.rel("spmm.accumulate", out, 2 * ref)
    empty = dev.asarray(sp.csr_matrix((50, 40), dtype=dt))
    c.value("spmm.no_entries", float(np.abs(to_numpy(spmm(empty, Yd))).max()), 0.0)
    spmm(empty, Yd, out, accumulate=True)
    c.rel("spmm.no_entries.accumulate", out, 2 * ref)
    index = rng.integers(0, 40, 90)
    buf = dev.xp.empty((90, 6), dtype=dt)
    c.flag("take_rows.into_out", take_rows(Yd, dev.xp.asarray(index), buf) is buf)
    c.rel("take_rows", buf, Y[index])
    c.value("asarray.sparse_round_trip", rel(to_numpy(Ad).toarray(), A.toarray()), 0.0)


def check_trainer(dev: Device, dt: np.dtype, c: Checks) -> None:
    """``Trainer``: histories, ``log_every``, validation, resume, conversion, workers, energy."""
    n, B, steps = 1024, 64, 20
    d = Decomposition1D(n, n // 32, overlap=2, kind="element")
    Fv, Uv = FourierRHS(n, dtype=dt).sample(16, _rng(21))

    def run(backend: str, log_every: int, total: int = steps, stop: int | None = None,
            path: str | None = None, resume: str | None = None, sampler_dtype: Any = dt,
            workers: int = 1) -> Trainer:
        op = SchwarzOperator(d, local_rank=4, seed=0, dtype=dt, backend=backend)
        cfg = TrainingConfig(steps=total, batch_size=B, lr=LR, progress=False, val_every=5,
                             log_every=log_every, plateau_patience=3, workers=workers)
        trainer = Trainer(op, FourierRHS(n, dtype=sampler_dtype, backend=backend), cfg,
                          train_seed=4711, validation=(Fv, Uv), checkpoint=path)
        if resume is not None:
            trainer.load_checkpoint(resume)
        trainer.run(stop)
        return trainer

    host = run("numpy", 1)
    device = run(dev.backend, 5)
    device1 = run(dev.backend, 1)
    hh, hd = host.history, device.history
    c.flag("trainer.steps", len(hd["train"]) == len(hh["train"]) == steps, len(hd["train"]))
    c.rel("trainer.history", hd["train"], hh["train"], c.tol_train)
    c.rel("trainer.lr", hd["lr"], hh["lr"], c.tol_train)
    c.rel("trainer.validation", hd["val"], hh["val"], c.tol_train)
    c.rel("trainer.theta", device.op.theta, host.op.theta, c.tol_train)
    c.value("trainer.log_every_changes_nothing", rel(hd["train"], device1.history["train"]), 0.0)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ckpt.npz")
        first = run(dev.backend, 5, stop=10, path=path)
        first.save_checkpoint(path)
        resumed = run(dev.backend, 5, resume=path)
    c.rel("trainer.resume", resumed.history["train"], hd["train"], c.tol_train)
    c.rel("trainer.resume.theta", resumed.op.theta, device.op.theta, c.tol_train)
    if dt == np.float32:  # a float64 sampler feeding a float32 operator
        conv_h, conv_d = (run(b, 1 if b == "numpy" else 5, sampler_dtype=np.float64)
                          for b in ("numpy", dev.backend))
        c.rel("trainer.float64_sampler", conv_d.history["train"], conv_h.history["train"],
              c.tol_train)
    if dev.cpu:  # numpy: workers split the batch, same result up to rounding
        c.rel("trainer.workers", run(dev.backend, 5, workers=2).history["train"],
              hd["train"], c.tol_train)
    else:  # one batch at once on a GPU: workers > 1 must be refused with a clear error
        try:
            run(dev.backend, 5, workers=2)
            c.flag("trainer.workers_refused", False, "no error")
        except ValueError as exc:
            c.flag("trainer.workers_refused", "workers" in str(exc), exc)
    # the energy loss with a device weight, on preconditioning pairs (the learned preconditioner)
    A = poisson_1d(n)
    hist = {}
    for side, b in (("host", "numpy"), ("device", dev.backend)):
        op = learned_schwarz_preconditioner(A, d, base="jacobi", init="scaled", dtype=dt,
                                            backend=b)
        cfg = TrainingConfig(steps=10, batch_size=16, lr=0.05 * parameter_scale(A),
                             loss="energy", progress=False,
                             val_every=10**9, log_every=1 if side == "host" else 5)
        hist[side] = Trainer(op, PreconditionerSampler(A, "energy", dtype=dt, backend=b), cfg,
                             loss_weight=asarray(A.astype(dt), backend=b)).run().history["train"]
    c.rel("trainer.energy", hist["device"], hist["host"], c.tol_train)


def check_preconditioners(dev: Device, dt: np.dtype, c: Checks) -> None:
    """``TwoLevelSchwarz`` (variants x coarse bases), ``jacobi``, and the device's CG/GMRES."""
    n, B = 1024, 8
    d = Decomposition1D(n, 32, overlap=2)
    A = poisson_1d(n)
    X = _rng(14).standard_normal((A.shape[0], B)).astype(dt)
    Xd = dev.asarray(X)
    for variant in VARIANTS:
        for coarse in (*COARSE_BASES, None):
            h, g = both(lambda b, v=variant, cb=coarse: TwoLevelSchwarz(
                A, d, coarse_basis=cb, variant=v, dtype=dt, local_solver="dense", backend=b), dev)
            c.value(f"two_level.{variant}.{coarse}",
                    max(rel(g.matmat(Xd), h.matmat(X)), rel(g.rmatmat(Xd), h.rmatmat(X))), c.tol)
    # mixed precision: float32 local inverses applied to the working precision
    h, g = both(lambda b: TwoLevelSchwarz(A, d, dtype=dt, local_solver="dense",
                                          factor_dtype=np.float32, backend=b), dev)
    c.value("two_level.factor_dtype_float32",
            max(rel(g.matmat(Xd), h.matmat(X)), rel(g.rmatmat(Xd), h.rmatmat(X))), c.tol)
    # update: the numeric phase again on the device for new values of the same pattern,
    # against a fresh host build on the new matrix; the options object as the keywords
    A2 = (A + sp.diags(np.linspace(0.0, 1.0, A.shape[0]))).tocsr()
    for reuse in (False, True):
        g = TwoLevelSchwarz(A, d, dtype=dt, local_solver="dense", backend=dev.backend)
        # the reference: a fresh host build on A2 (with the kept basis for reuse_coarse)
        fresh = TwoLevelSchwarz(A2, d, coarse_basis=g.coarse_matrix if reuse else "auto",
                                dtype=dt, local_solver="dense")
        g.update(A2, reuse_coarse=reuse)
        c.value(f"two_level.update{'_reuse_coarse' if reuse else ''}",
                rel(g.matmat(Xd), fresh.matmat(X)), c.tol)
    g = TwoLevelSchwarz(A, d, dtype=dt, backend=dev.backend, options=SchwarzOptions(
        variant="hybrid", local_solver="dense"))
    h = TwoLevelSchwarz(A, d, variant="hybrid", dtype=dt, local_solver="dense")
    c.rel("two_level.options", g.matmat(Xd), h.matmat(X))
    h, g = both(lambda b: jacobi(A, dtype=dt, backend=b), dev)
    c.rel("jacobi", g.matmat(Xd), h.matmat(X))
    # Krylov solves: the device's module with device operators against scipy with host ones
    rtol = KRYLOV_RTOL[dt.name]
    Ah = A.astype(dt)
    Ad = dev.asarray(Ah)
    b = _rng(15).standard_normal(A.shape[0]).astype(dt)
    bd = dev.asarray(b)
    cases = {
        "additive": ("cg", lambda be: TwoLevelSchwarz(A, d, dtype=dt, local_solver="dense",
                                                      backend=be)),
        "symmetric_restricted": ("cg", lambda be: TwoLevelSchwarz(
            A, d, variant="symmetric_restricted", dtype=dt, local_solver="dense", backend=be)),
        "restricted_gmres": ("gmres", lambda be: TwoLevelSchwarz(
            A, d, variant="restricted", dtype=dt, local_solver="dense", backend=be)),
        "jacobi": ("cg", lambda be: jacobi(A, dtype=dt, backend=be)),
    }
    for name, (method, make) in cases.items():
        Mh, Md = both(make, dev)
        _, info_h, calls_h = krylov_solve(spla, method, Ah, b, Mh, rtol, 5 * A.shape[0])
        xd, info_d, calls_d = dev.solve(method, Ad, bd, Md, rtol, 5 * A.shape[0])
        residual = rel(Ah @ to_numpy(xd), b)
        c.flag(f"krylov.{name}.converged", info_d == 0 and info_h == 0, (info_d, info_h))
        c.value(f"krylov.{name}.residual", residual, 10 * rtol)
        if method == "cg":
            c.value(f"krylov.{name}.iterations", abs(calls_d - calls_h), max(1, 0.05 * calls_h))


def check_learned(dev: Device, dt: np.dtype, c: Checks) -> None:
    """The learned preconditioner: construction, initialisation, objective, training, CG."""
    n = 1024
    d = Decomposition1D(n, 32, overlap=2)
    A = poisson_1d(n)
    X = _rng(16).standard_normal((A.shape[0], 8)).astype(dt)
    Xd = dev.asarray(X)
    for base in BASES:
        for init in LEARNED_INITS:
            h, g = both(lambda b, base=base, init=init: learned_schwarz_preconditioner(
                A, d, base=base, init=init, dtype=dt, backend=b), dev)
            c.value(f"learned.{base}.{init}", max(rel(g.theta, h.theta),
                                                  rel(g.matmat(Xd), h.matmat(X)),
                                                  rel(g.rmatmat(Xd), h.rmatmat(X))), c.tol)
    ch, cd = both(lambda b: classical_init(SchwarzOperator(d, local_rank=4, dtype=dt, backend=b),
                                           A), dev)
    c.rel("learned.classical_init", cd.theta, ch.theta)
    # the default learned preconditioner (two-level additive Schwarz at the start) from here on
    h, g = both(lambda b: learned_schwarz_preconditioner(A, d, dtype=dt, backend=b), dev)
    Z = PreconditionerSampler(A, "gaussian").sample(16, _rng(17))[1]
    for objective in OBJECTIVES:
        c.rel(f"learned.objective.{objective}", preconditioner_objective(g, A, Z, objective),
              preconditioner_objective(h, A, Z, objective))
    b = _rng(18).standard_normal(A.shape[0])
    (ih, okh, _), (i_d, okd, _) = cg_iterations(A, h, b), cg_iterations(A, g, b)
    c.flag("learned.cg_iterations.converged", okh and okd, (okh, okd))
    c.value("learned.cg_iterations", abs(i_d - ih), 1)
    rtol = KRYLOV_RTOL[dt.name]
    Ah = A.astype(dt)
    for objective in OBJECTIVES:
        ops = both(lambda be: learned_schwarz_preconditioner(A, d, dtype=dt, backend=be,
                                                             local_init_scale=0.1), dev)
        res = [train_preconditioner(op, A, steps=20, check_every=10, batch_size=16,
                                    objective=objective) for op in ops]
        c.flag(f"learned.train.{objective}.status", res[1].status == res[0].status == "finished",
               (res[1].status, res[0].status))
        c.rel(f"learned.train.{objective}.history", res[1].history["train"],
              res[0].history["train"], c.tol_train)
        c.value(f"learned.train.{objective}.best_iterations",
                abs(res[1].best.iterations - res[0].best.iterations), 1)
        c.rel(f"learned.train.{objective}.theta", ops[1].theta, ops[0].theta, c.tol_train)
        # the trained operator inside the device's CG
        _, info_h, calls_h = krylov_solve(spla, "cg", Ah, b.astype(dt), ops[0], rtol, 2 * n)
        xd, info_d, calls_d = dev.solve("cg", dev.asarray(Ah), dev.asarray(b.astype(dt)),
                                        ops[1], rtol, 2 * n)
        c.flag(f"learned.train.{objective}.cg_converged", info_d == 0 and info_h == 0,
               (info_d, info_h))
        c.value(f"learned.train.{objective}.cg_iterations", abs(calls_d - calls_h),
                max(1, 0.05 * calls_h))
        c.value(f"learned.train.{objective}.cg_residual", rel(Ah @ to_numpy(xd), b), 10 * rtol)


def check_problems_2d(dev: Device, dt: np.dtype, c: Checks) -> None:
    """2D problems on algebraic and box decompositions: operators, preconditioners, CG."""
    g = 24
    A, xy = poisson_2d(g, return_coordinates=True)
    K = diffusion_2d(high_contrast_channels(g, 1e4, period=6))
    decos = {"boxes": decomposition_from_grid((g, g), (3, 3), overlap=1),
             "rcb": decomposition_from_matrix(A, 9, overlap=1, partitioner="rcb",
                                              coordinates=xy)}
    try:
        import pymetis  # noqa: F401 - METIS is optional here; the other partitioners are not
        decos["metis"] = decomposition_from_matrix(A, 9, overlap=1)
    except ImportError:
        c.flag("problems2d.metis", True, "skipped: pymetis is not installed")
    rtol = KRYLOV_RTOL[dt.name]
    rng = _rng(22)
    for name, d in decos.items():
        X = rng.standard_normal((A.shape[0], 8)).astype(dt)
        Y = rng.standard_normal((A.shape[0], 8)).astype(dt)
        Xd, Yd = dev.asarray(X), dev.asarray(Y)
        h, gd = both(lambda b, d=d: SchwarzOperator(d, local_rank=3, coarse_basis="pou", seed=2,
                                                    dtype=dt, backend=b), dev)
        vh, grad_h = h.value_and_grad_flat(X, Y, "wmse")
        vd, grad_d = gd.value_and_grad_flat(Xd, Yd, "wmse")
        c.value(f"problems2d.{name}.schwarz", max(rel(gd.matmat(Xd), h.matmat(X)),
                                                  rel(gd.rmatmat(Xd), h.rmatmat(X)),
                                                  rel(vd, vh), rel(grad_d, grad_h)), c.tol)
        for matrix_name, M in (("poisson", A), ("channels", K)):
            for variant in VARIANTS:
                Mh, Md = both(lambda b, M=M, d=d, v=variant: TwoLevelSchwarz(
                    M, d, coarse_basis="pou", variant=v, dtype=dt, local_solver="dense",
                    backend=b), dev)
                c.value(f"problems2d.{name}.{matrix_name}.two_level.{variant}",
                        max(rel(Md.matmat(Xd), Mh.matmat(X)),
                            rel(Md.rmatmat(Xd), Mh.rmatmat(X))), c.tol)
            # algebraic coarse spaces from the matrix and the non-overlapping owner labels
            bases = {v: gdsw_basis(M, d.owner, variant=v) for v in GDSW_VARIANTS}
            bases["nicolaides"] = nicolaides_basis(d)
            # the adaptive spaces (built on the host, larger coarse problems on the device);
            # GenEO may select nothing on the homogeneous matrix
            bases["agdsw"] = agdsw_basis(M, d.owner)
            geneo = geneo_basis(M, d)
            if geneo.shape[1]:
                bases["geneo"] = geneo
            for basis_name, Phi in bases.items():
                Mh, Md = both(lambda b, M=M, d=d, Phi=Phi: TwoLevelSchwarz(
                    M, d, coarse_basis=Phi, dtype=dt, local_solver="dense", backend=b), dev)
                b = rng.standard_normal(M.shape[0]).astype(dt)
                Ms = M.astype(dt)
                _, info_h, calls_h = krylov_solve(spla, "cg", Ms, b, Mh, rtol, 1000)
                xd, info_d, calls_d = dev.solve("cg", dev.asarray(Ms), dev.asarray(b), Md, rtol,
                                                1000)
                key = f"problems2d.{name}.{matrix_name}.{basis_name}"
                c.value(f"{key}.two_level", max(rel(Md.matmat(Xd), Mh.matmat(X)),
                                                rel(Md.rmatmat(Xd), Mh.rmatmat(X))), c.tol)
                c.flag(f"{key}.cg_converged", info_d == 0 and info_h == 0, (info_d, info_h))
                c.value(f"{key}.cg_iterations", abs(calls_d - calls_h), max(1, 0.05 * calls_h))
                c.value(f"{key}.cg_residual", rel(Ms @ to_numpy(xd), b), 10 * rtol)
            if matrix_name == "poisson":  # a learned operator on the GDSW coarse space
                Phi = bases["gdsw"]
                Sh, Sd = both(lambda b, d=d, Phi=Phi: SchwarzOperator(
                    d, local_rank=2, coarse_basis=Phi, coarse_rank=10, seed=3, dtype=dt,
                    backend=b), dev)
                vh, grad_h = Sh.value_and_grad_flat(X, Y, "mse")
                vd, grad_d = Sd.value_and_grad_flat(Xd, Yd, "mse")
                c.value(f"problems2d.{name}.gdsw.schwarz",
                        max(rel(Sd.matmat(Xd), Sh.matmat(X)), rel(vd, vh), rel(grad_d, grad_h)),
                        c.tol)
            b = rng.standard_normal(M.shape[0]).astype(dt)
            Mh, Md = both(lambda be, M=M, d=d: learned_schwarz_preconditioner(
                M, d, coarse_basis="pou", dtype=dt, backend=be), dev)
            c.value(f"problems2d.{name}.{matrix_name}.learned",
                    max(rel(Md.matmat(Xd), Mh.matmat(X)), rel(Md.theta, Mh.theta)), c.tol)
            Ms = M.astype(dt)
            _, info_h, calls_h = krylov_solve(spla, "cg", Ms, b, Mh, rtol, 1000)
            xd, info_d, calls_d = dev.solve("cg", dev.asarray(Ms), dev.asarray(b), Md, rtol, 1000)
            c.flag(f"problems2d.{name}.{matrix_name}.cg_converged", info_d == 0 and info_h == 0,
                   (info_d, info_h))
            c.value(f"problems2d.{name}.{matrix_name}.cg_iterations", abs(calls_d - calls_h),
                    max(1, 0.05 * calls_h))
            c.value(f"problems2d.{name}.{matrix_name}.cg_residual", rel(Ms @ to_numpy(xd), b),
                    10 * rtol)


AGREEMENT_GROUPS: tuple[tuple[str, Callable[[Device, np.dtype, Checks], None]], ...] = (
    ("schwarz", check_schwarz), ("variants", check_variants), ("global", check_global),
    ("losses", check_losses), ("optim", check_optim), ("data", check_data),
    ("helpers", check_helpers), ("trainer", check_trainer),
    ("preconditioners", check_preconditioners), ("learned", check_learned),
    ("problems2d", check_problems_2d),
)


def agreement(dev: Device, dtype_name: str) -> dict[str, Any]:
    c = Checks(dtype_name)
    dt = np.dtype(dtype_name)
    for name, fn in AGREEMENT_GROUPS:
        c.group(name, lambda fn=fn: fn(dev, dt, c))
    failed = c.failed()
    return {"dtype": dtype_name, "ok": not failed, "failed": failed, "num_checks": len(c.rows),
            "checks": c.rows, "seconds": c.seconds}


# -- timing helpers ----------------------------------------------------------------------------
def chunk_rate(dev: Device, run_chunk: Callable[[int], Any], one: float, min_time: float) -> float:
    """Median steps/s of three timed chunks; ``run_chunk(k)`` runs k steps."""
    k = max(1, int(min_time / 3 / max(one, 1e-6)))
    return float(np.median([k / dev.seconds(lambda: run_chunk(k)) for _ in range(3)]))


def compute_loop(dev: Device, op: Any, F: Any, U: Any, lr: float, log_every: int,
                 loss: str = "wmse", weight: Any = None) -> Callable[[int], None]:
    """``run(k)``: k steps of forward + backward + AdamW on a fixed batch.

    The loss is fetched every ``log_every`` steps and after the last one (the
    only device-to-host copy); ``run.marks`` gets the host time just before
    each fetch.
    """
    opt = AdamW([op.theta], lr=lr, weight_decay=0.0)
    grad = dev.xp.empty_like(op.theta)
    losses: list[Any] = []
    marks: list[float] = []
    last: list[float] = []

    def run(k: int) -> None:
        for i in range(k):
            v, g = op.value_and_grad_flat(F, U, loss, out=grad, check=False, loss_weight=weight)
            opt.step([g])
            losses.append(v)
            if (i + 1) % log_every == 0 or i == k - 1:
                marks.append(time.perf_counter())
                last[:] = [float(dev.xp.stack(losses)[-1])]
                losses.clear()

    run.marks = marks  # type: ignore[attr-defined]
    run.last = last  # type: ignore[attr-defined]
    return run


class StampedSampler:
    """A sampler that notes the host time of every draw, to see how far the host runs ahead."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.dtype = inner.dtype
        self.backend = inner.backend
        self.stamps: list[float] = []

    def sample(self, batch_size: int, rng: np.random.Generator, out: Any = None) -> Any:
        self.stamps.append(time.perf_counter())
        return self.inner.sample(batch_size, rng, out=out)


def issue_fraction(dev: Device, run_chunk: Callable[[int], Any], stamps: list[float],
                   k: int = ISSUE_STEPS) -> float:
    """Host time until the last of ``k`` steps was issued, over the time until its loss arrived.

    Near 1 when something waits for the device every step (or when the step is
    too short for the device to fall behind); well below 1 when the host runs
    ahead of the device, as it can when only the logged loss comes back.
    """
    dev.synchronize()
    stamps.clear()
    t0 = time.perf_counter()
    run_chunk(k)
    total = time.perf_counter() - t0
    return float((stamps[-1] - t0) / total) if stamps and total > 0 else math.nan


def time_peer(dev: Device, make_model: Callable[[Any], Any], op: Any, F: Any, U: Any,
              lr: float, args: argparse.Namespace) -> dict[str, Any]:
    """A PyTorch peer of ``op`` on the device: agreement at the initial parameters, steps/s."""
    if args.no_torch:
        return {"status": "skipped"}
    try:
        import torch
    except ImportError:
        return {"status": "torch not installed"}
    if not dev.cpu and not torch.cuda.is_available():
        return {"status": "torch has no CUDA"}
    from benchmarks import torch_peer as tp

    cuda = dev.torch_device == "cuda"
    Ft, Ut = torch.from_dlpack(F), torch.from_dlpack(U)  # zero-copy views of the batch
    out: dict[str, Any] = {"status": "ok", "version": torch.__version__}
    try:
        model = make_model(tp)
    except (RuntimeError, NotImplementedError) as exc:
        return {"status": "peer failed: " + str(exc).splitlines()[0][:200]}
    out.update(getattr(model, "notes", {}))
    # the same model: loss and gradient at the same parameters and batch
    value, grads = tp.value_and_grad(model, Ft, Ut, "wmse")
    vd, gd = op.value_and_grad_flat(F, U, "wmse")
    out["loss_rel"] = rel(value, vd)
    out["grad_rel"] = rel(op.flatten(grads), gd)
    model.zero_grad(set_to_none=True)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses: list[Any] = []

    def run(k: int) -> None:
        for i in range(k):
            loss = tp.wmse_loss(model(Ft), Ut)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())
            if (i + 1) % args.log_every == 0 or i == k - 1:
                torch.stack(losses)[-1].item()
                losses.clear()

    def seconds(fn: Callable[[], Any]) -> float:
        if not cuda:
            t = time.perf_counter()
            fn()
            return time.perf_counter() - t
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    run(3)
    one = seconds(lambda: run(3)) / 3
    k = max(1, int(args.min_time / 3 / max(one, 1e-6)))
    out["steps_per_s"] = float(np.median([k / seconds(lambda: run(k)) for _ in range(3)]))
    if cuda:
        out["peak_bytes"] = int(torch.cuda.max_memory_allocated())
    model = opt = None  # release the peer's parameters and optimiser state
    if cuda:
        torch.cuda.empty_cache()  # give the peer's cached blocks back before ddops runs
    return out


def schwarz_peer(dev: Device, op: Any) -> Callable[[Any], Any]:
    """``TorchSchwarzBatched`` with a CSR ``Phi`` (autograd on CUDA), else COO."""
    def make(tp: Any) -> Any:
        errors = {}
        for coarse in ("csr", "coo"):
            try:
                model = tp.TorchSchwarzBatched(op, device=dev.torch_device,
                                               dtype=tp.torch_dtype(op.dtype), coarse=coarse)
                F = tp.torch.zeros((op.shape[0], 2), dtype=tp.torch_dtype(op.dtype),
                                   device=dev.torch_device)
                tp.wmse_loss(model(F), F + 1).backward()  # CSR autograd may be missing
                model.zero_grad(set_to_none=True)
                model.notes = {"coarse": coarse, **errors}
                return model
            except (RuntimeError, NotImplementedError) as exc:
                errors[f"{coarse}_error"] = str(exc).splitlines()[0][:200]
        raise RuntimeError("; ".join(errors.values()))
    return make


# -- 2. Krylov ---------------------------------------------------------------------------------
def krylov_1d(dev: Device, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """The 1D problem with ``N = min(n / 32, 4096)`` subdomains and interface hats."""
    N = min(n // 32, KRYLOV_MAX_SUBDOMAINS)
    return krylov_case(dev, f"1d n={n}", n, poisson_1d(n), Decomposition1D(n, N, overlap=2),
                       "interface_hats", args)


def krylov_2d(dev: Device, grid: int, boxes: int, args: argparse.Namespace) -> dict[str, Any]:
    """2D Poisson on ``grid x grid`` points, ``boxes x boxes`` boxes, overlap 1, ``pou``."""
    d = decomposition_from_grid((grid, grid), (boxes, boxes), overlap=1)
    A = poisson_2d(grid)
    extra = {v: gdsw_basis(A, d.owner, variant=v) for v in GDSW_VARIANTS}
    return krylov_case(dev, f"2d {grid}x{grid}", grid * grid, A, d, "pou", args, extra)


def krylov_case(dev: Device, label: str, n: int, A: sp.csr_matrix, d: Decomposition,
                coarse_basis: str, args: argparse.Namespace,
                extra_bases: dict[str, sp.csr_matrix] | None = None) -> dict[str, Any]:
    """Preconditioned CG/GMRES on the device against scipy on the host, float64.

    ``extra_bases``: further coarse matrices, each tried in two-level additive Schwarz.
    """
    m = A.shape[0]
    Ad = dev.asarray(A)
    b = _rng(19).standard_normal(m)
    bd = dev.asarray(b)
    rtol = KRYLOV_RTOL["float64"]
    out: dict[str, Any] = {"problem": label, "n": n, "N": d.num_subdomains,
                           "coarse_basis": coarse_basis, "rtol": rtol, "solvers": {}}

    def solver(backend: str) -> str:
        return "auto" if backend == "numpy" else "dense"  # dense local inverses on a GPU

    def learned(backend: str) -> SchwarzOperator:
        # base and coarse factor of two-level additive Schwarz
        base = TwoLevelSchwarz(A, d, coarse=False, backend=backend, local_solver=solver(backend))
        op = learned_schwarz_preconditioner(A, d, base=base, init="scaled",
                                            coarse_basis=coarse_basis, backend=backend)
        if backend == "numpy":
            op.params["Q"][...] = 0
            classical_init(op, A, local=False)
        return op

    cases = {
        "two_level_additive": ("cg", lambda be: TwoLevelSchwarz(
            A, d, coarse_basis, backend=be, local_solver=solver(be))),
        "two_level_symmetric_restricted": ("cg", lambda be: TwoLevelSchwarz(
            A, d, coarse_basis, variant="symmetric_restricted", backend=be,
            local_solver=solver(be))),
        "ras_gmres": ("gmres", lambda be: TwoLevelSchwarz(
            A, d, coarse_basis, variant="restricted", backend=be, local_solver=solver(be))),
        "learned_classical": ("cg", learned),
    }
    for basis_name, Phi in (extra_bases or {}).items():
        out.setdefault("coarse_dims", {})[basis_name] = int(Phi.shape[1])
        cases[f"two_level_additive_{basis_name}"] = ("cg", lambda be, Phi=Phi: TwoLevelSchwarz(
            A, d, Phi, backend=be, local_solver=solver(be)))
    if n > KRYLOV_ALL_SOLVERS_MAX_N:
        cases = {k: cases[k] for k in ("two_level_additive", "learned_classical")}
    device_ops: dict[str, Any] = {}
    for name, (method, make) in cases.items():
        row: dict[str, Any] = {"method": method}
        try:
            t = time.perf_counter()
            Mh = make("numpy")
            row["host_setup_s"] = time.perf_counter() - t
            t = time.perf_counter()
            Md = make(dev.backend)
            if name == "learned_classical":  # the host's classical coarse factor, copied over
                Md.theta[...] = dev.asarray(Mh.theta)
            dev.synchronize()
            row["setup_s"] = time.perf_counter() - t
            for part in ("local", "coarse"):  # TwoLevelSchwarz (the learned one: its base)
                holder = getattr(Md, "base", None) or Md
                if hasattr(holder, f"{part}_setup_seconds"):
                    row[f"{part}_setup_s"] = getattr(holder, f"{part}_setup_seconds")
            if hasattr(Md, "update"):  # the numeric phase again (same matrix, same pattern)
                t = time.perf_counter()
                Md.update(A)
                dev.synchronize()
                row["update_s"] = time.perf_counter() - t
                row["phases"] = Md.stats["phases"]
            t = time.perf_counter()
            xh, info_h, calls_h = krylov_solve(spla, method, A, b, Mh, rtol, 500)
            row["host_solve_s"] = time.perf_counter() - t
            dev.solve(method, Ad, bd, Md, rtol, 3)  # warm-up: kernels, cuSPARSE handles
            result: list[Any] = []
            row["solve_s"] = dev.seconds(lambda Md=Md, method=method, result=result: result.append(
                dev.solve(method, Ad, bd, Md, rtol, 500)))
            xd, info_d, calls_d = result[0]
            row.update(info=info_d, host_info=info_h, residual=rel(A @ to_numpy(xd), b),
                       host_residual=rel(A @ xh, b), solution_rel=rel(xd, xh))
            if method == "cg":
                row.update(iterations=calls_d, host_iterations=calls_h,
                           s_per_iteration=row["solve_s"] / max(calls_d, 1))
            else:
                row.update(callbacks=calls_d, host_callbacks=calls_h)
            row["host_over_device"] = row["host_solve_s"] / row["solve_s"]
            if name == "learned_classical":
                device_ops[name] = Md  # trained next
            Md = Mh = None
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory: report, go on
            row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        dev.free()
        out["solvers"][name] = row
    its = {k: v.get("iterations") for k, v in out["solvers"].items()}
    if its.get("learned_classical") is not None and its.get("two_level_additive") is not None:
        out["learned_equals_two_level"] = abs(its["learned_classical"]
                                              - its["two_level_additive"]) <= 1
    out["training"] = learned_training(dev, A, device_ops.pop("learned_classical", None), args)
    dev.free()
    return out


def learned_training(dev: Device, A: sp.csr_matrix, op: SchwarzOperator | None,
                     args: argparse.Namespace) -> dict[str, Any]:
    """Steps/s of the learned preconditioner ``op`` with the energy loss (float64, B = 32)."""
    n = A.shape[0]
    out: dict[str, Any] = {"batch": KRYLOV_BATCH}
    if op is None:
        return {"error": "no learned operator"}
    try:
        # nonzero local factors (the classical start has Q = 0), at the "scaled" size
        scale = math.sqrt(1e-2 / (float(A.diagonal().mean()) * op.local_rank))
        op.params["Q"][...] = dev.asarray(scale * _rng(23).standard_normal(op.params["Q"].shape))
        weight = dev.asarray(A)
        sampler = PreconditionerSampler(A, "energy", backend=dev.backend)
        F, U = sampler.sample(KRYLOV_BATCH, _rng(20))
        run = compute_loop(dev, op, F, U, 1e-3 * parameter_scale(A), args.log_every,
                           loss="energy", weight=weight)
        run(3)
        one = dev.seconds(lambda: run(3)) / 3
        out["compute_steps_per_s"] = chunk_rate(dev, run, one, args.min_time / 2)
        out["compute_loss_last"] = run.last[-1]
        if n <= KRYLOV_TRAINER_MAX_N:
            cfg = TrainingConfig(steps=10**9, batch_size=KRYLOV_BATCH, loss="energy",
                                 lr=1e-3 * parameter_scale(A), progress=False,
                                 val_every=10**9, log_every=args.log_every)
            trainer = Trainer(op, sampler, cfg, loss_weight=weight)
            statuses: set[str] = set()

            def train(k: int) -> None:
                statuses.add(trainer.run(trainer.step + k).status)

            train(3)
            one = dev.seconds(lambda: train(3)) / 3
            out["steps_per_s"] = chunk_rate(dev, train, one, args.min_time / 2)
            hist = trainer.history["train"]
            out["finite"] = bool(np.all(np.isfinite(hist)))
            out["status"] = ",".join(sorted(statuses))
    except Exception as exc:  # noqa: BLE001 - report, go on
        out["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    dev.free()
    return out


# -- 3. speed ----------------------------------------------------------------------------------
def coarse_rank_for(n: int, cap: int) -> int:
    """``r0 = N - 1``, capped at ``cap`` (0: no cap)."""
    r0 = n // 32 - 1
    return r0 if cap <= 0 else min(r0, cap)


def time_case(dev: Device, n: int, dtype_name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Set-up, the torch peer (first, from the initial factors), then ddops, for one case."""
    dt = np.dtype(dtype_name)
    dev.free()
    r0 = coarse_rank_for(n, args.max_coarse_rank)
    t0 = time.perf_counter()
    d = Decomposition1D(n, n // 32, overlap=2, kind="element")
    op = SchwarzOperator(d, local_rank=4, coarse_rank=r0, seed=0, dtype=dt, backend=dev.backend)
    rhs = FourierRHS(n, dtype=dt, backend=dev.backend)
    dev.synchronize()
    out: dict[str, Any] = {"r0": r0, "setup_s": time.perf_counter() - t0,
                           "num_params": int(op.num_params)}
    F, U = rhs.sample(BATCH, _rng(7))          # the fixed batch
    lr = lr_for(n)
    try:
        out["torch"] = time_peer(dev, schwarz_peer(dev, op), op, F, U, lr, args)
    except Exception as exc:  # noqa: BLE001 - report and go on (e.g. out of memory)
        out["torch"] = {"status": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}
    log_every = args.log_every
    cfg = TrainingConfig(steps=10**9, batch_size=BATCH, lr=lr, progress=False,
                         val_every=10**9, log_every=log_every)
    sampler = StampedSampler(rhs)
    trainer = Trainer(op, sampler, cfg, train_seed=4711)
    statuses: set[str] = set()

    def train(k: int) -> None:
        statuses.add(trainer.run(trainer.step + k).status)  # a diverged run would stop early

    train(3)                                            # warm-up: cuBLAS, pool, kernels
    one = dev.seconds(lambda: train(3)) / 3
    # Trainer.run ends with a flush of the buffered losses (one device-to-host copy)
    out["steps_per_s"] = chunk_rate(dev, train, one, args.min_time)
    # from a multiple of log_every, so that the only flush of the probe is its last step
    train(-(-trainer.step // log_every) * log_every - trainer.step)
    out["issue_fraction"] = issue_fraction(dev, train, sampler.stamps,
                                           min(ISSUE_STEPS, log_every))
    out["status"] = ",".join(sorted(statuses))
    hist = trainer.history["train"]
    out["steps"] = int(trainer.step)
    out["finite"] = bool(np.all(np.isfinite(hist)))
    out["loss_first"], out["loss_last"] = float(hist[0]), float(hist[-1])
    # without data: the fixed batch, forward + backward + AdamW, loss fetched every log_every
    compute = compute_loop(dev, op, F, U, lr, log_every)
    compute(3)
    out["compute_steps_per_s"] = chunk_rate(dev, compute, one, args.min_time)
    out["compute_loss_last"] = compute.last[-1]
    probe = compute_loop(dev, op, F, U, lr, log_every)
    probe(1)
    out["compute_issue_fraction"] = issue_fraction(dev, probe, probe.marks,
                                                   min(ISSUE_STEPS, log_every))
    out["matmat_per_s"] = chunk_rate(dev, lambda k: [op.matmat(F) for _ in range(k)], one / 3,
                                     args.min_time / 2)
    dev.synchronize()
    out["pool_bytes"] = dev.pool_bytes()
    out["batch_param_bytes"] = 3 * op.shape[0] * BATCH * dt.itemsize + int(op.theta.nbytes)
    trainer = compute = probe = train = None  # release their buffers before the variants
    out["variants"] = time_variants(dev, op, F, U, lr, args, one)
    return out  # the arrays are released here; the next case starts with free()


def time_variants(dev: Device, op: SchwarzOperator, F: Any, U: Any, lr: float,
                  args: argparse.Namespace, one: float) -> dict[str, Any]:
    """The step without data for the energy loss, the tied operator and the global baseline."""
    out: dict[str, Any] = {}
    d, r0, dt = op.decomposition, op.coarse_rank, op.dtype
    n = d.num_dofs + 1
    specs: dict[str, Callable[[], tuple[Any, str, Any]]] = {
        "energy": lambda: (op, "energy", dev.asarray(poisson_1d(n).astype(dt))),
        "tied": lambda: (SchwarzOperator(d, local_rank=4, coarse_rank=r0, seed=0, dtype=dt,
                                         backend=dev.backend, tied=True), "wmse", None),
        "global": lambda: (GlobalLowRankOperator(d.num_dofs, GLOBAL_RANK, seed=0, dtype=dt,
                                                 backend=dev.backend), "wmse", None),
    }
    for name, make in specs.items():
        row: dict[str, Any] = {}
        try:
            dev.free()
            model, loss, weight = make()
            if name == "global":
                row["torch"] = time_peer(dev, lambda tp, m=model: tp.TorchGlobal(
                    m, device=dev.torch_device, dtype=tp.torch_dtype(m.dtype)),
                    model, F, U, lr, args)
            run = compute_loop(dev, model, F, U, lr, args.log_every, loss=loss, weight=weight)
            run(3)
            row["compute_steps_per_s"] = chunk_rate(dev, run, one, args.min_time / 2)
            row["loss_last"] = run.last[-1]
            model = run = weight = None
        except Exception as exc:  # noqa: BLE001 - report, go on
            row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        out[name] = row
    dev.free()
    return out


# -- 4. targets --------------------------------------------------------------------------------
def fitted_exponent(ns: list[int], rates: list[float]) -> float | None:
    """Least-squares slope of log(time per step) against log(n)."""
    pts = [(math.log(n), -math.log(r)) for n, r in zip(ns, rates) if r and r > 0]
    if len(pts) < 2:
        return None
    x, y = np.array(pts).T
    return float(np.polyfit(x, y, 1)[0])


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with its number and MET / NOT MET (None: not measured)."""
    rows: list[dict[str, Any]] = []
    speed = [r for r in report.get("speed", []) if "steps_per_s" in r]

    def add(name: str, value: Any, ok: bool | None, detail: str = "") -> None:
        rows.append({"target": name, "value": value, "met": ok, "detail": detail})

    at = {(r["n"], r["dtype"]): r for r in speed}
    r8 = at.get((8192, "float32"))
    add(f"training steps/s at n = 8192, float32 >= {TARGET_STEPS_8192:g}",
        r8 and r8["steps_per_s"], None if r8 is None else r8["steps_per_s"] >= TARGET_STEPS_8192)
    for dt in DTYPES:
        rows_dt = sorted((r for r in speed if r["dtype"] == dt), key=lambda r: r["n"])
        for key, label in (("steps_per_s", "Trainer"), ("compute_steps_per_s", "no data")):
            e = fitted_exponent([r["n"] for r in rows_dt], [r[key] for r in rows_dt])
            add(f"time per step linear in n ({label}, {dt}): exponent <= {TARGET_EXPONENT}", e,
                None if e is None else e <= TARGET_EXPONENT,
                f"n = {rows_dt[0]['n']} ... {rows_dt[-1]['n']}" if rows_dt else "")
        ratios = [(r["n"], r["compute_steps_per_s"] / r["torch"]["steps_per_s"],
                   r["steps_per_s"] / r["torch"]["steps_per_s"]) for r in rows_dt
                  if r.get("torch", {}).get("steps_per_s")]
        for idx, label in ((1, "no data"), (2, "Trainer")):
            worst = min(ratios, key=lambda t: t[idx]) if ratios else None
            add(f"ddops / PyTorch peer ({label}, {dt}) >= {TARGET_PEER_RATIO}",
                worst and worst[idx], None if worst is None else worst[idx] >= TARGET_PEER_RATIO,
                f"smallest ratio at n = {worst[0]}" if worst else "")
    agree = report.get("agreement", [])
    add("device losses and gradients equal the CPU's (all agreement checks)",
        sum(len(a["failed"]) for a in agree) if agree else None,
        all(a["ok"] for a in agree) if agree else None, "number of failed checks")
    peer = [(r["n"], r["dtype"], r["torch"].get("grad_rel")) for r in speed
            if r.get("torch", {}).get("grad_rel") is not None]
    bad = [p for p in peer if not p[2] <= TOL[p[1]]]
    add("the PyTorch peer computes the same loss gradient",
        max((p[2] for p in peer), default=None), None if not peer else not bad,
        f"failed at {[(p[0], p[1]) for p in bad]}" if bad else "")
    for key, label in (("issue_fraction", "Trainer"), ("compute_issue_fraction", "no data")):
        largest = max(speed, key=lambda r: r["n"])["n"] if speed else None
        vals = [r[key] for r in speed if r["n"] == largest and r.get(key) is not None]
        v = max(vals) if vals else None
        add(f"no host round trip per step ({label}): host-issue fraction at the largest n "
            f"< {TARGET_ISSUE_FRACTION}", v,
            None if v is None or not math.isfinite(v) else v < TARGET_ISSUE_FRACTION,
            f"n = {largest}")
    return rows


# -- report ------------------------------------------------------------------------------------
def clean(obj: Any) -> Any:
    """JSON-safe: non-finite floats become None, numpy scalars Python numbers."""
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, (np.integer, np.bool_)):
        return obj.item()
    return obj


def write(report: dict[str, Any], path: str | None) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, clean(report), indent=1)


def fmt(x: Any, spec: str = ".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def print_summary(report: dict[str, Any]) -> None:
    print()
    for a in report.get("agreement", []):
        worst = max(((k, r["value"]) for k, r in a["checks"].items() if r["value"] is not None),
                    key=lambda t: t[1], default=("-", math.nan))
        print(f"agreement {a['dtype']}: {a['num_checks']} checks, "
              f"{'OK' if a['ok'] else 'FAILED: ' + ', '.join(a['failed'][:12])} "
              f"(largest difference {worst[1]:.1e} in {worst[0]})")
    if report.get("krylov"):
        print(f"\n{'problem':>14} {'N':>5} {'solver':>31} {'its':>5} {'host its':>8} "
              f"{'setup s':>7} {'solve s':>8} {'host s':>7} {'x host':>6} {'residual':>8}")
        for case in report["krylov"]:
            if "skipped" in case:
                print(f"{case['problem']:>14} skipped: {case['skipped']}")
                continue
            for name, r in case.get("solvers", {}).items():
                if "error" in r:
                    print(f"{case['problem']:>14} {case['N']:>5} {name:>31} ERROR {r['error']}")
                    continue
                print(f"{case['problem']:>14} {case['N']:>5} {name:>31} "
                      f"{fmt(r.get('iterations', r.get('callbacks')), 'd'):>5} "
                      f"{fmt(r.get('host_iterations', r.get('host_callbacks')), 'd'):>8} "
                      f"{r['setup_s']:>7.2f} {r['solve_s']:>8.4f} {r['host_solve_s']:>7.3f} "
                      f"{r['host_over_device']:>6.1f} {r['residual']:>8.1e}")
            t = case.get("training", {})
            print(f"{case['problem']:>14} {case['N']:>5} {'learned: energy steps/s':>31} "
                  f"Trainer {fmt(t.get('steps_per_s'))}, no data "
                  f"{fmt(t.get('compute_steps_per_s'))} {t.get('error', '')}")
    if report.get("speed"):
        print(f"\nlog_every={report['args']['log_every']}; B={BATCH}; N=n/32, r=4, "
              f"r0=min(N-1, {report['args']['max_coarse_rank']})")
        print(f"{'n':>8} {'dtype':>7} {'r0':>5} {'setup s':>7} {'steps/s':>8} {'no-data':>8} "
              f"{'matmat/s':>8} {'torch':>8} {'x torch':>7} {'issue':>5} {'tied':>8} "
              f"{'energy':>8} {'global':>8} {'x tglob':>7} {'GPU GiB':>7}")
        for row in report["speed"]:
            if "error" in row or "skipped" in row:
                print(f"{row['n']:>8} {row['dtype']:>7} {row.get('error', row.get('skipped'))}")
                continue
            t_rate = row["torch"].get("steps_per_s")
            torch_cell = fmt(t_rate) if t_rate else str(row["torch"].get("status", "n/a"))[:8]
            v = row.get("variants", {})
            g = v.get("global", {})
            g_t = g.get("torch", {}).get("steps_per_s")
            g_ratio = fmt(g["compute_steps_per_s"] / g_t, ".2f") if g_t and \
                g.get("compute_steps_per_s") else "-"
            print(f"{row['n']:>8} {row['dtype']:>7} {row['r0']:>5} {row['setup_s']:>7.1f} "
                  f"{row['steps_per_s']:>8.1f} {row['compute_steps_per_s']:>8.1f} "
                  f"{row['matmat_per_s']:>8.1f} {torch_cell:>8} "
                  f"{fmt(row['compute_steps_per_s'] / t_rate, '.2f') if t_rate else '-':>7} "
                  f"{fmt(row.get('compute_issue_fraction'), '.2f'):>5} "
                  f"{fmt(v.get('tied', {}).get('compute_steps_per_s')):>8} "
                  f"{fmt(v.get('energy', {}).get('compute_steps_per_s')):>8} "
                  f"{fmt(g.get('compute_steps_per_s')):>8} {g_ratio:>7} "
                  f"{row['pool_bytes'] / 2**30:>7.2f}")
    if report.get("targets"):
        note = " (--cpu dry run: not a measurement)" if report["args"]["cpu"] else ""
        print(f"\ntargets{note}:")
        for t in report["targets"]:
            state = "not measured" if t["met"] is None else "MET" if t["met"] else "NOT MET"
            value = t["value"]
            shown = f"{value:.3g}" if isinstance(value, (int, float)) else "-"
            print(f"  {state:>12}  {t['target']}: {shown} {t['detail']}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.cpu:
        reason = gpu_or_reason()
        if reason is not None:
            print(f"gpu_check: skipped: {reason} (--cpu runs the same paths with numpy)")
            return 2
    dev = Device(args.cpu)
    if args.cpu:  # one BLAS thread: small products on a shared CPU, as the Trainer runs them
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
    t_start = time.perf_counter()
    report: dict[str, Any] = {"environment": dev.describe(), "args": vars(args),
                              "agreement": [], "krylov": [], "speed": []}
    env = report["environment"]
    print(f"device: {env['device']}; " + ", ".join(
        f"{k} {env[k]}" for k in ("cupy", "cuda_runtime", "cuda_driver", "torch", "torch_cuda")
        if env.get(k) is not None), flush=True)
    write(report, args.json)

    def over_budget() -> bool:
        return time.perf_counter() - t_start > args.max_seconds

    if "agreement" in args.sections:
        for dt in [t for t in ("float64", "float32") if t in args.dtypes]:
            a = agreement(dev, dt)
            report["agreement"].append(a)
            print(f"agreement {dt}: {a['num_checks']} checks in {sum(a['seconds'].values()):.0f}"
                  f" s -> {'OK' if a['ok'] else 'FAILED: ' + ', '.join(a['failed'])}", flush=True)
            write(report, args.json)
    if "speed" in args.sections:
        for n in args.sizes:
            for dt in args.dtypes:
                if over_budget():
                    report["speed"].append({"n": n, "dtype": dt, "skipped": "time budget"})
                    continue
                try:
                    row = {"n": n, "dtype": dt, **time_case(dev, n, dt, args)}
                except Exception as exc:  # noqa: BLE001 - e.g. out of memory: report, go on
                    row = {"n": n, "dtype": dt,
                           "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}
                dev.free()
                report["speed"].append(row)
                tt = row.get("torch", {})
                print(f"n={n} {dt}: ddops {fmt(row.get('steps_per_s'))} steps/s "
                      f"({row.get('error', 'ok')}), torch "
                      f"{fmt(tt.get('steps_per_s')) if 'steps_per_s' in tt else tt.get('status')}",
                      flush=True)
                write(report, args.json)
    if "krylov" in args.sections:
        grid, boxes = CPU_KRYLOV_2D if args.cpu else KRYLOV_2D
        cases = [(f"1d n={n}", lambda n=n: krylov_1d(dev, n, args)) for n in args.krylov_sizes]
        cases.append((f"2d {grid}x{grid}", lambda: krylov_2d(dev, grid, boxes, args)))
        for label, run_case in cases:
            if over_budget():
                report["krylov"].append({"problem": label, "skipped": "time budget"})
                continue
            case = run_case()
            report["krylov"].append(case)
            its = {k: v.get("iterations", v.get("error")) for k, v in case["solvers"].items()}
            print(f"krylov {label}: iterations {its}", flush=True)
            write(report, args.json)
    report["targets"] = targets(report)
    report["seconds"] = time.perf_counter() - t_start
    write(report, args.json)
    print_summary(report)
    print(f"\n{report['seconds']:.0f} s in all; results in {args.json}")
    ok = all(a["ok"] for a in report["agreement"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
