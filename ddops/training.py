"""The training loop shared by every trainable operator.

One step draws a batch of right-hand sides with their exact solutions, runs
the operator's batched forward and hand-derived backward pass into a flat
gradient and applies one optimiser update to the flat parameter vector; the
plateau scheduler watches the training loss.  Checkpoints are written
atomically and hold everything needed to continue bit for bit: parameters,
optimiser and scheduler state, the random stream and the history.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from ._validation import check_choice, check_int, check_positive_float
from .backend import to_numpy
from .data import FourierRHS
from .io import atomic_savez
from .losses import loss_value
from .operators import LowRankOperator
from .optim import Adam, AdamW, ReduceLROnPlateau

__all__ = ["OPTIMIZERS", "TrainingConfig", "TrainingResult", "Trainer", "LOSS_ALIASES"]

OPTIMIZERS = ("adamw", "adam")

#: Loss names accepted by the trainer (``"weighted_mse"`` is the paper script's spelling).
LOSS_ALIASES = {"weighted_mse": "wmse", "wmse": "wmse", "mse": "mse", "energy": "energy"}


@dataclass
class TrainingConfig:
    """Hyper-parameters of :class:`Trainer` (defaults: the paper's v2 setting).

    Attributes
    ----------
    steps : int
        Optimisation steps.
    batch_size : int
        Right-hand sides per step.
    lr : float
        Initial learning rate.
    loss : {"wmse", "mse", "energy"}
        Training loss (``"weighted_mse"`` is accepted for ``"wmse"``;
        ``"energy"`` needs the trainer's ``loss_weight``).
    optimizer : {"adamw", "adam"}
        Optimiser (PyTorch semantics).
    weight_decay : float
        Weight decay (decoupled for AdamW, L2 for Adam).
    betas, eps : optimiser constants.
    scheduler : bool
        Use ``ReduceLROnPlateau`` on the training loss.
    plateau_factor, plateau_patience : scheduler constants.
    val_every : int
        Evaluate the validation loss every this many steps (and at the end).
    log_every : int
        Fetch the training loss from the device every this many steps (1 on the
        CPU costs nothing; larger values avoid a host round trip per step on a
        GPU, and the scheduler then sees the buffered losses in order: a rate
        reduction takes effect at the next multiple of ``log_every``, and a run
        resumed at such a multiple continues exactly as an uninterrupted one).
    checkpoint_every : int
        Write a checkpoint every this many steps (0: never, except on request).
    progress : bool
        Show a tqdm progress bar.
    blas_threads : int or None
        BLAS threads during training (``None``: leave the library's setting).
        The products of one step are small or memory-bound; on a few shared
        cores a multi-threaded BLAS spends more time synchronising than
        computing (measured: 2 threads up to several times slower than 1 on
        a loaded 2-core machine), so the default is 1.
    workers : int
        Threads that share one step (numpy backend): the batch is split into
        ``workers`` contiguous column blocks whose forward, loss and backward
        run in their own threads (numpy, scipy and the BLAS release the GIL),
        and the block losses and gradients are combined with weights
        ``B_k / B`` (every loss is a mean over columns).  With a stock
        :class:`~ddops.data.FourierRHS` of the operator's dtype the
        coefficients are drawn once and every worker forms its own columns of
        ``F`` and ``U``; any other sampler draws the whole batch, which the
        workers copy in parts.  The random stream is the same as with one
        worker and the results differ only by rounding; a resumed run repeats
        an uninterrupted one exactly for the same ``workers``.  Worth it for
        large blocks (about ``n >= 1024`` at ``B = 256``) when cores are free;
        use it with ``blas_threads=1``.
    """

    steps: int = 2000
    batch_size: int = 256
    lr: float = 1e-3
    loss: str = "wmse"
    optimizer: str = "adamw"
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    scheduler: bool = True
    plateau_factor: float = 0.5
    plateau_patience: int = 200
    val_every: int = 50
    log_every: int = 1
    checkpoint_every: int = 0
    progress: bool = True
    blas_threads: int | None = 1
    workers: int = 1

    def validated(self) -> TrainingConfig:
        """Return a checked copy (clear errors naming the field)."""
        c = TrainingConfig(**asdict(self))
        c.steps = check_int("steps", c.steps, minimum=0)
        c.batch_size = check_int("batch_size", c.batch_size, minimum=1)
        c.lr = check_positive_float("lr", c.lr)
        if c.loss not in LOSS_ALIASES:
            raise ValueError(f"loss must be one of {tuple(LOSS_ALIASES)}, got {c.loss!r}")
        c.loss = LOSS_ALIASES[c.loss]
        check_choice("optimizer", c.optimizer, OPTIMIZERS)
        c.weight_decay = check_positive_float("weight_decay", c.weight_decay, allow_zero=True)
        c.val_every = check_int("val_every", c.val_every, minimum=1)
        c.log_every = check_int("log_every", c.log_every, minimum=1)
        c.checkpoint_every = check_int("checkpoint_every", c.checkpoint_every, minimum=0)
        if c.checkpoint_every % c.log_every:
            raise ValueError(f"checkpoint_every ({c.checkpoint_every}) must be a multiple of "
                             f"log_every ({c.log_every}) so that checkpoints hold every loss")
        c.plateau_patience = check_int("plateau_patience", c.plateau_patience, minimum=0)
        if c.blas_threads is not None:
            c.blas_threads = check_int("blas_threads", c.blas_threads, minimum=1)
        c.workers = check_int("workers", c.workers, minimum=1)
        if c.workers > c.batch_size:
            raise ValueError(f"workers ({c.workers}) must not exceed batch_size "
                             f"({c.batch_size})")
        c.betas = tuple(float(b) for b in c.betas)  # type: ignore[assignment]
        return c


@dataclass
class TrainingResult:
    """What :meth:`Trainer.run` returns.

    Attributes
    ----------
    status : {"finished", "diverged"}
        ``"diverged"`` when a non-finite loss stopped training.
    message : str
        Human-readable summary.
    steps : int
        Steps completed.
    history : dict of numpy arrays
        ``step``, ``train`` (loss per step), ``lr`` (rate used at each step),
        ``val_step`` and ``val``.
    seconds : dict
        Wall time: ``total``, ``data`` (sampling and exact solutions),
        ``step`` (forward, backward, update).
    """

    status: str
    message: str
    steps: int
    history: dict[str, np.ndarray]
    seconds: dict[str, float] = field(default_factory=dict)


class Trainer:
    """Train a :class:`~ddops.operators.LowRankOperator` on sampled right-hand sides.

    Parameters
    ----------
    op : SchwarzOperator or GlobalLowRankOperator
        The operator; its parameters are updated in place.
    sampler : object
        Has ``sample(batch_size, rng) -> (F, U)`` on the operator's backend
        (for example :class:`ddops.data.FourierRHS`).
    config : TrainingConfig, optional
        Hyper-parameters.
    train_seed : int
        Seed of the training stream (a numpy ``Generator``).
    validation : tuple (F, U), optional
        Fixed validation set.
    checkpoint : path-like, optional
        Where periodic checkpoints go.
    loss_weight : sparse matrix or array, optional
        The SPD weight of ``loss="energy"`` (on the operator's backend).
    """

    def __init__(self, op: LowRankOperator, sampler: Any, config: TrainingConfig | None = None,
                 train_seed: int = 4711, validation: tuple[Any, Any] | None = None,
                 checkpoint: str | Path | None = None, loss_weight: Any = None) -> None:
        if not isinstance(op, LowRankOperator):
            raise TypeError(f"op must be a ddops trainable operator, got {type(op).__name__}")
        self.op = op
        self.sampler = sampler
        self.config = (config or TrainingConfig()).validated()
        self.train_seed = check_int("train_seed", train_seed, minimum=0)
        self.rng = np.random.default_rng(self.train_seed)
        if validation is not None:
            Fv, Uv = validation
            Fv, Uv = op.xp.asarray(Fv, dtype=op.dtype), op.xp.asarray(Uv, dtype=op.dtype)
            if Fv.ndim != 2 or Fv.shape != Uv.shape or Fv.shape[0] != op.shape[0]:
                raise ValueError("validation must be (F, U) blocks of shape (n, B)")
            validation = (Fv, Uv)
        self.validation = validation
        if (self.config.loss == "energy") != (loss_weight is not None):
            raise ValueError("loss_weight is required with loss='energy' and only used there")
        self.loss_weight = loss_weight
        self.checkpoint_path = None if checkpoint is None else Path(checkpoint)
        c = self.config
        opt_cls = AdamW if c.optimizer == "adamw" else Adam
        self.optimizer = opt_cls([op.theta], lr=c.lr, betas=c.betas, eps=c.eps,
                                 weight_decay=c.weight_decay)
        self.scheduler = (ReduceLROnPlateau(self.optimizer, mode="min", factor=c.plateau_factor,
                                            patience=c.plateau_patience)
                          if c.scheduler else None)
        self.step = 0
        self._hist: dict[str, list[float]] = {"step": [], "train": [], "lr": [],
                                              "val_step": [], "val": []}
        self._grad = op.xp.empty_like(op.theta)
        self._batch: Any = None  # (F, U) buffers reused across steps, or False
        if self.config.workers > 1 and op.xp is not np:
            raise ValueError("workers > 1 needs the numpy backend (a GPU runs one batch at once)")
        W, B = self.config.workers, self.config.batch_size
        self._bounds = [k * B // W for k in range(W + 1)]  # column blocks of the workers
        self._blocks: dict[int, tuple[Any, Any, Any]] = {}  # worker -> (F, U, gradient)
        self.seconds = {"total": 0.0, "data": 0.0, "step": 0.0}

    # -- history and validation ---------------------------------------------------------
    @property
    def history(self) -> dict[str, np.ndarray]:
        """History so far as numpy arrays."""
        return {k: np.asarray(v, dtype=np.int64 if k.endswith("step") else np.float64)
                for k, v in self._hist.items()}

    def validation_loss(self) -> float:
        """Loss of the current operator on the validation set (NaN if there is none)."""
        if self.validation is None:
            return math.nan
        Fv, Uv = self.validation
        return float(loss_value(self.config.loss, self.op._apply(Fv, False), Uv,
                                weight=self.loss_weight))

    # -- the loop -----------------------------------------------------------------------
    def run(self, steps: int | None = None) -> TrainingResult:
        """Train until ``steps`` (default ``config.steps``) steps are done in total.

        Returns a :class:`TrainingResult`; a non-finite loss stops the run with
        ``status="diverged"`` and leaves the last checkpoint untouched.
        """
        c = self.config
        target = c.steps if steps is None else check_int("steps", steps, minimum=0)
        op, opt = self.op, self.optimizer
        pending: list[tuple[int, float, Any]] = []
        status, message = "finished", ""
        t_start = time.perf_counter()
        bar = tqdm(total=target, initial=self.step, disable=not c.progress, leave=False,
                   desc=type(op).__name__, unit="step")
        limits = (threadpool_limits(limits=c.blas_threads, user_api="blas")
                  if c.blas_threads is not None else contextlib.nullcontext())
        limits.__enter__()
        pool = ThreadPoolExecutor(c.workers) if c.workers > 1 else None
        try:
            while self.step < target:
                t0 = time.perf_counter()
                value, grad, data_seconds = self._value_and_grad(pool)
                pending.append((self.step, opt.lr, value))
                opt.step([grad])
                self.step += 1
                self.seconds["data"] += data_seconds
                self.seconds["step"] += time.perf_counter() - t0 - data_seconds
                checkpoint_due = (c.checkpoint_every and self.checkpoint_path is not None
                                  and self.step % c.checkpoint_every == 0)
                # a checkpoint must hold every loss so far (and none may be NaN)
                if self.step % c.log_every == 0 or self.step == target or checkpoint_due:
                    bad = self._flush(pending)
                    bar.update(len(pending))
                    pending = []
                    if bad is not None:
                        status = "diverged"
                        message = (f"{type(op).__name__}: loss became {bad} at step "
                                   f"{self.step}; training stopped"
                                   + (f", last checkpoint {self.checkpoint_path} kept"
                                      if self.checkpoint_path else ""))
                        break
                    if c.progress:
                        bar.set_postfix(loss=f"{self._hist['train'][-1]:.3e}", refresh=False)
                if self.step % c.val_every == 0 or self.step == c.steps:
                    self._hist["val_step"].append(self.step)
                    self._hist["val"].append(self.validation_loss())
                if checkpoint_due:
                    self.save_checkpoint(self.checkpoint_path)
        finally:
            if pool is not None:
                pool.shutdown()
            limits.__exit__(None, None, None)
            bar.close()
            self.seconds["total"] += time.perf_counter() - t_start
        if status == "finished":
            message = f"{type(op).__name__}: {self.step} steps"
            if self.checkpoint_path is not None and c.checkpoint_every:
                self.save_checkpoint(self.checkpoint_path)
        return TrainingResult(status, message, self.step, self.history, dict(self.seconds))

    def _value_and_grad(self, pool: ThreadPoolExecutor | None) -> tuple[Any, Any, float]:
        """Loss and gradient of one fresh batch, and the seconds spent drawing it."""
        c, op = self.config, self.op
        if pool is None:
            t0 = time.perf_counter()
            # a sampler of another dtype: convert (the products write into op-dtype buffers)
            F, U = (X.astype(op.dtype, copy=False) for X in self._sample())
            data_seconds = time.perf_counter() - t0
            value, grad = op.value_and_grad_flat(F, U, c.loss, out=self._grad, check=False,
                                                 loss_weight=self.loss_weight)
            return value, grad, data_seconds
        # one draw for the whole batch (the same stream as one worker), then column blocks
        t0 = time.perf_counter()
        if self._blockwise_sampler():
            source = ("coefficients", self.sampler.sample_coefficients(c.batch_size, self.rng))
        else:
            source = ("batch", self.sampler.sample(c.batch_size, self.rng))
        drawn = time.perf_counter() - t0
        results = [f.result() for f in [pool.submit(self._block_value_and_grad, k, source)
                                        for k in range(c.workers)]]
        for k in range(1, c.workers):
            self._grad += self._blocks[k][2]
        value = sum(v for v, _ in results)
        return value, self._grad, drawn + max(d for _, d in results)

    def _blockwise_sampler(self) -> bool:
        """Whether workers may form their own column blocks from shared coefficients.

        True for a :class:`~ddops.data.FourierRHS` of the operator's dtype whose
        ``sample`` is the stock one (``synthesize(sample_coefficients(...))``);
        any other sampler draws whole batches, which the workers then split.
        """
        sampler = self.sampler
        return (isinstance(sampler, FourierRHS) and type(sampler).sample is FourierRHS.sample
                and sampler.dtype == self.op.dtype and sampler.backend == self.op.backend)

    def _block_value_and_grad(self, k: int, source: tuple[str, Any]) -> tuple[Any, float]:
        """Worker ``k``: its column block's data, loss and gradient, weighted by ``B_k / B``."""
        c, op = self.config, self.op
        lo, hi = self._bounds[k], self._bounds[k + 1]
        if k not in self._blocks:
            shape = (op.shape[0], hi - lo)
            self._blocks[k] = (op.xp.empty(shape, dtype=op.dtype),
                               op.xp.empty(shape, dtype=op.dtype),
                               self._grad if k == 0 else op.xp.empty_like(op.theta))
        F, U, grad = self._blocks[k]
        t0 = time.perf_counter()
        kind, data = source
        if kind == "coefficients":
            self.sampler.synthesize(data[:, lo:hi], out=(F, U))
        else:
            F[...] = data[0][:, lo:hi]
            U[...] = data[1][:, lo:hi]
        data_seconds = time.perf_counter() - t0
        value, grad = op.value_and_grad_flat(F, U, c.loss, out=grad, check=False,
                                             loss_weight=self.loss_weight, slot=k)
        weight = (hi - lo) / c.batch_size  # every loss is a mean over the columns
        grad *= weight
        return value * weight, data_seconds

    def _sample(self) -> tuple[Any, Any]:
        """One training batch; written into reused buffers when the sampler supports ``out=``."""
        if self._batch is None:
            F, U = self.sampler.sample(self.config.batch_size, self.rng)
            try:
                signature = inspect.signature(self.sampler.sample)
                reusable = "out" in signature.parameters
            except (TypeError, ValueError):
                reusable = False
            self._batch = (F, U) if reusable else False
            return F, U
        if self._batch is False:
            return self.sampler.sample(self.config.batch_size, self.rng)
        return self.sampler.sample(self.config.batch_size, self.rng, out=self._batch)

    def _flush(self, pending: list[tuple[int, float, Any]]) -> float | None:
        """Move buffered losses to the host, step the scheduler; return a bad value if any."""
        if self.op.xp is np:
            values = [float(v) for _, _, v in pending]
        else:  # one device-to-host transfer for all buffered losses
            values = to_numpy(self.op.xp.stack([v for _, _, v in pending])).tolist()
        for (step, lr, _), value in zip(pending, values):
            if not math.isfinite(value):
                return value
            self._hist["step"].append(step + 1)
            self._hist["train"].append(value)
            self._hist["lr"].append(lr)
            if self.scheduler is not None:
                self.scheduler.step(value)
        return None

    # -- checkpoints --------------------------------------------------------------------
    def save_checkpoint(self, path: str | Path) -> Path:
        """Write parameters, optimiser, scheduler, random stream and history, atomically."""
        arrays: dict[str, Any] = {"theta": to_numpy(self.op.theta)}
        for key, value in self.optimizer.state_dict().items():
            arrays["opt_" + key] = np.asarray(value)
        if self.scheduler is not None:
            for key, value in self.scheduler.state_dict().items():
                arrays["sched_" + key] = np.asarray(value)
        for key, value in self.history.items():
            arrays["hist_" + key] = value
        meta = {"step": self.step, "train_seed": self.train_seed,
                "rng": self.rng.bit_generator.state, "seconds": self.seconds,
                "config": asdict(self.config), "num_params": int(self.op.theta.size)}
        arrays["meta"] = np.array(json.dumps(meta))
        return atomic_savez(path, **arrays)

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore a checkpoint written by :meth:`save_checkpoint` (validated, no pickle)."""
        try:
            with np.load(path, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
            meta = json.loads(str(data["meta"]))
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"cannot read checkpoint {str(path)!r}: {exc}") from exc
        theta = data["theta"]
        if theta.shape != self.op.theta.shape or not np.all(np.isfinite(theta)):
            raise ValueError(f"checkpoint {str(path)!r} does not match this operator")
        saved = meta.get("config", {})
        mine = asdict(self.config)
        for key in ("batch_size", "loss", "optimizer", "scheduler", "log_every"):
            if saved.get(key) != mine[key]:
                raise ValueError(f"checkpoint {str(path)!r} was written with {key}="
                                 f"{saved.get(key)!r}, this run has {key}={mine[key]!r}")
        if meta.get("train_seed") != self.train_seed:
            raise ValueError(f"checkpoint {str(path)!r} was written with train_seed="
                             f"{meta.get('train_seed')!r}, this run has {self.train_seed}")
        self.optimizer.load_state_dict({k[4:]: v for k, v in data.items()
                                        if k.startswith("opt_")})
        if self.scheduler is not None:
            self.scheduler.load_state_dict({k[6:]: v for k, v in data.items()
                                            if k.startswith("sched_")})
        self.op.theta[...] = self.op.xp.asarray(theta, dtype=self.op.dtype)
        self.rng.bit_generator.state = meta["rng"]
        self.step = int(meta["step"])
        self.seconds = {k: float(v) for k, v in meta["seconds"].items()}
        self._hist = {k[5:]: v.tolist() for k, v in data.items() if k.startswith("hist_")}
