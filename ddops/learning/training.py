"""The training loop shared by every trainable operator.

One step draws a batch of right-hand sides with their exact solutions, runs
the operator's batched forward and hand-derived backward pass into a flat
gradient and applies one optimiser update to the flat parameter vector; the
plateau scheduler watches the training loss.  Checkpoints are written
atomically and hold everything needed to continue bit for bit: parameters,
optimiser and scheduler state, the random stream and the history, together
with the settings and the operator's architecture, so that a resumed run is
refused (or the change recorded) when it would not continue the same run.
A run that blows up stops with status ``"diverged"`` and never overwrites
the last good checkpoint.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from .._validation import check_choice, check_int, check_positive_float
from ..backend import to_numpy
from ..io import (
    _json_default,
    atomic_savez,
    check_parameter_vector,
    describe_operator,
    read_npz,
)
from ..operators import LowRankOperator
from ..operators.losses import loss_value
from .data import BasisRHS
from .initialisation import LR_SCALINGS, lr_scales
from .optim import Adam, AdamW, ReduceLROnPlateau

__all__ = ["OPTIMIZERS", "TrainingConfig", "TrainingResult", "Trainer", "LOSS_ALIASES",
           "ChangedSettingsError", "stderr_is_terminal",
           "RESUME_SETTINGS", "INIT_SETTINGS", "CHECKPOINT_FORMAT"]

OPTIMIZERS = ("adamw", "adam")

#: Loss names accepted by the trainer (``"weighted_mse"`` is the paper script's spelling).
LOSS_ALIASES = {"weighted_mse": "wmse", "wmse": "wmse", "mse": "mse", "energy": "energy"}

#: Version of the checkpoint metadata (1: before the settings, the operator and
#: the sampler were recorded; such files lack those entries).
CHECKPOINT_FORMAT = 2

#: The :class:`TrainingConfig` fields that a resumed run must share with its
#: checkpoint (they change the result), besides ``train_seed``, the sampler
#: and the operator's architecture.  ``val_every``, ``checkpoint_every``,
#: ``progress`` and ``blas_threads`` may change freely, and ``steps`` may grow
#: (a longer run continues the shorter one).  The plateau constants count only
#: when either run uses the scheduler.
RESUME_SETTINGS = ("steps", "batch_size", "lr", "loss", "optimizer", "weight_decay", "betas",
                   "eps", "scheduler", "plateau_factor", "plateau_patience", "log_every",
                   "workers", "divergence_factor", "divergence_window", "lr_scaling")

#: The operator's initialisation switches (its ``coarse_init`` and ``local_init``,
#: see :func:`ddops.learning.initialisation.problem_init`), which a checkpoint also
#: records and a resumed run must share.
INIT_SETTINGS = ("coarse_init", "local_init")

#: What a checkpoint of an older version that lacks one of the switches was
#: necessarily written with (the switches did not exist, so it had the defaults).
_DEFAULT_IF_UNRECORDED = {"lr_scaling": "none", "coarse_init": "random", "local_init": "random"}

_PLATEAU = ("plateau_factor", "plateau_patience")
_MISSING = object()  # a setting that a checkpoint does not record
_ABSENT = object()  # a recorded setting that this run does not have (another operator class)


def stderr_is_terminal() -> bool:
    """Whether standard error is a terminal: progress bars go there only then by default
    (in a log file or a pipe a bar is a stream of carriage returns)."""
    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, ValueError):  # replaced by an object without it, or closed
        return False


class ChangedSettingsError(ValueError):
    """A checkpoint written with other settings (a ValueError).

    ``differences`` names each setting with its old and new value, without the
    advice, which the command line words with its own flag.
    """

    def __init__(self, message: str, differences: str) -> None:
        super().__init__(message)
        self.differences = differences


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
    lr_scaling : {"none", "problem"}
        ``"problem"``: every entry's step is multiplied by the natural size of
        its block (:func:`ddops.learning.initialisation.lr_scales`; needs the
        trainer's ``A``), so that ``lr`` is a fraction of the entries' size
        at every number of subdomains and mesh width.  ``"none"``: the
        paper's Adam, ``lr`` for every entry.
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
    progress : bool or None
        Show a tqdm progress bar on standard error; None (the default): only when
        standard error is a terminal (:func:`stderr_is_terminal`, the rule of the
        command line's ``--progress``/``--no-progress``), so that a log file or a
        pipe gets no bars.
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
        :class:`~ddops.learning.data.BasisRHS` sampler (``FourierRHS``,
        ``GridFourierRHS``, ``MatrixRHS``) of the operator's dtype the
        coefficients are drawn once and every worker forms its own columns of
        ``F`` and ``U``; any other sampler draws the whole batch, which the
        workers copy in parts.  The random stream is the same as with one
        worker and the results differ only by rounding; a resumed run repeats
        an uninterrupted one exactly for the same ``workers``.  Worth it for
        large blocks (about ``n >= 1024`` at ``B = 256``) when cores are free;
        use it with ``blas_threads=1``.
    divergence_factor : float or None
        Blow-up test: the run stops with status ``"diverged"`` when the
        training loss stays above ``divergence_factor`` times the loss of the
        first step (the untrained operator) for ``divergence_window``
        consecutive steps.  ``None`` or 0 disables the test (a non-finite loss
        or non-finite parameters stop a run always).  Default ``1e4``, far
        from normal runs: in the paper's settings (``ddops compare`` v2 and
        v1, learning rates 1e-4 to 1e-1, 2000 steps, three seeds) the loss
        never stayed above 40 times its first value for 100 steps in a row
        (single steps spike to almost 1e6 times at the rate 1e-1), nor the
        learned preconditioners' loss above 5 times for 50 steps; at a rate
        of 10 or more (``--lr 1e6``) it passes 1e4 within a few steps and
        stays there.
    divergence_window : int or None
        Consecutive steps above the threshold that count as divergence
        (default 100, so that a short spike, which Adam and the scheduler
        usually recover from, does not stop a run).  ``None`` or 0 disables
        the test.  A checkpoint is never written while the loss is above the
        threshold, so the file kept after a divergence is the last good state.
    """

    steps: int = 2000
    batch_size: int = 256
    lr: float = 1e-3
    loss: str = "wmse"
    optimizer: str = "adamw"
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    lr_scaling: str = "none"
    scheduler: bool = True
    plateau_factor: float = 0.5
    plateau_patience: int = 200
    val_every: int = 50
    log_every: int = 1
    checkpoint_every: int = 0
    progress: bool | None = None
    blas_threads: int | None = 1
    workers: int = 1
    divergence_factor: float | None = 1e4
    divergence_window: int | None = 100

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
        check_choice("lr_scaling", c.lr_scaling, LR_SCALINGS)
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
        if c.progress is None:
            c.progress = stderr_is_terminal()
        elif not isinstance(c.progress, (bool, np.bool_)):
            raise TypeError(f"progress must be a bool or None, got {type(c.progress).__name__}")
        c.progress = bool(c.progress)
        c.workers = check_int("workers", c.workers, minimum=1)
        if c.workers > c.batch_size:
            raise ValueError(f"workers ({c.workers}) must not exceed batch_size "
                             f"({c.batch_size})")
        c.betas = tuple(float(b) for b in c.betas)  # type: ignore[assignment]
        if c.divergence_factor is not None:
            factor = check_positive_float("divergence_factor", c.divergence_factor,
                                          allow_zero=True)
            if 0 < factor <= 1:
                raise ValueError(f"divergence_factor must be > 1 (or 0 or None to disable the "
                                 f"blow-up test), got {factor}")
            c.divergence_factor = factor or None
        if c.divergence_window is not None:
            c.divergence_window = check_int("divergence_window", c.divergence_window,
                                            minimum=0) or None
        return c

    @property
    def divergence_test(self) -> tuple[float, int] | None:
        """``(factor, window)`` of the blow-up test, or ``None`` when it is disabled."""
        if not self.divergence_factor or not self.divergence_window:
            return None
        return float(self.divergence_factor), int(self.divergence_window)


@dataclass
class TrainingResult:
    """What :meth:`Trainer.run` returns.

    Attributes
    ----------
    status : {"finished", "diverged"}
        ``"diverged"`` when a non-finite loss, non-finite parameters or a
        blow-up of the loss (see ``TrainingConfig.divergence_factor``)
        stopped training.
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
    changed_settings : dict
        ``{setting: [old, new]}`` for every setting that differed from the
        checkpoint this run was resumed from (accepted with
        ``load_checkpoint(..., allow_changes=True)``); empty otherwise.
    """

    status: str
    message: str
    steps: int
    history: dict[str, np.ndarray]
    seconds: dict[str, float] = field(default_factory=dict)
    changed_settings: dict[str, list[Any]] = field(default_factory=dict)


class Trainer:
    """Train a :class:`~ddops.operators.LowRankOperator` on sampled right-hand sides.

    Parameters
    ----------
    op : SchwarzOperator or GlobalLowRankOperator
        The operator; its parameters are updated in place.
    sampler : object
        Has ``sample(batch_size, rng) -> (F, U)`` on the operator's backend
        (for example :class:`ddops.learning.data.FourierRHS`).
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
    A : sparse matrix or array, optional
        The system matrix whose scales ``lr_scaling="problem"`` uses
        (required there and only used there).

    Notes
    -----
    Subclasses may override ``_value_and_grad(pool)`` (loss, flat gradient and
    data seconds of one step) and ``save_checkpoint`` (for example
    data-parallel training, :mod:`ddops.distributed.training`).
    """

    def __init__(self, op: LowRankOperator, sampler: Any, config: TrainingConfig | None = None,
                 train_seed: int = 4711, validation: tuple[Any, Any] | None = None,
                 checkpoint: str | Path | None = None, loss_weight: Any = None,
                 A: Any = None) -> None:
        if not isinstance(op, LowRankOperator):
            raise TypeError(f"op must be a ddops trainable operator, got {type(op).__name__}")
        self.op = op
        self.sampler = _check_sampler(sampler, op)
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
        if (self.config.lr_scaling == "problem") != (A is not None):
            raise ValueError("A is required with lr_scaling='problem' and only used there")
        self.checkpoint_path = None if checkpoint is None else Path(checkpoint)
        c = self.config
        opt_cls = AdamW if c.optimizer == "adamw" else Adam
        #: The learning-rate multipliers of ``lr_scaling`` (``None`` for ``"none"``).
        self.lr_scale = None if A is None else [lr_scales(op, A)]
        self.optimizer = opt_cls([op.theta], lr=c.lr, betas=c.betas, eps=c.eps,
                                 weight_decay=c.weight_decay, lr_scale=self.lr_scale)
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
        # blow-up test: the first step's loss and the steps in a row above the threshold
        # (both follow from the history, so a resumed run repeats the decision exactly)
        self._reference: float | None = None
        self._streak = 0
        #: Why the run diverged (``None`` while it has not); no checkpoint is written then.
        self.diverged: str | None = None
        #: ``{setting: [old, new]}`` accepted by :meth:`load_checkpoint` (empty by default).
        self.changed_settings: dict[str, list[Any]] = {}

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

        Returns a :class:`TrainingResult`.  A non-finite loss, non-finite
        parameters or a blow-up of the loss (``config.divergence_factor`` and
        ``divergence_window``) stop the run with ``status="diverged"`` and a
        one-line message; the last good checkpoint is kept (no checkpoint is
        written of a diverged state, nor while the loss is above the blow-up
        threshold).
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
                    if bad is None and not bool(op.xp.isfinite(op.theta).all()):
                        bad = f"parameters became NaN or inf at step {self.step}"
                    if bad is not None:
                        status = "diverged"
                        message = f"{type(op).__name__}: {bad}; training stopped as diverged"
                        if self.checkpoint_path is not None:
                            message += (f", last checkpoint {self.checkpoint_path} kept"
                                        if self.checkpoint_path.exists()
                                        else ", no checkpoint was written")
                        self.diverged = message
                        break
                    if c.progress:
                        bar.set_postfix(loss=f"{self._hist['train'][-1]:.3e}", refresh=False)
                if self.step % c.val_every == 0 or self.step == c.steps:
                    self._hist["val_step"].append(self.step)
                    self._hist["val"].append(self.validation_loss())
                if checkpoint_due and not self._streak:  # never a state about to blow up
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
                if self._streak:
                    message += (f"; checkpoint {self.checkpoint_path} not updated: the loss is "
                                "above the divergence threshold")
                else:
                    self.save_checkpoint(self.checkpoint_path)
        return TrainingResult(status, message, self.step, self.history, dict(self.seconds),
                              dict(self.changed_settings))

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

        True for a :class:`~ddops.learning.data.BasisRHS` (``FourierRHS``,
        ``GridFourierRHS``, ``MatrixRHS``, ...) of the operator's dtype whose
        ``sample`` is the stock one (``synthesize(sample_coefficients(...))``);
        any other sampler draws whole batches, which the workers then split.
        """
        sampler = self.sampler
        return (isinstance(sampler, BasisRHS) and type(sampler).sample is BasisRHS.sample
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
            _check_batch_size(self.sampler, int(F.shape[0]), self.op)
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

    def _flush(self, pending: list[tuple[int, float, Any]]) -> str | None:
        """Move buffered losses to the host, step the scheduler; say why the run diverged.

        Returns ``None``, or a message when a loss is not finite (it is not
        recorded) or the loss has blown up (recorded; the losses buffered after
        it are dropped).
        """
        if not pending:
            return None
        if self.op.xp is np:
            values = [float(v) for _, _, v in pending]
        else:  # one device-to-host transfer for all buffered losses
            values = to_numpy(self.op.xp.stack([v for _, _, v in pending])).tolist()
        for (step, lr, _), value in zip(pending, values):
            if not math.isfinite(value):
                return f"loss became {value} at step {step + 1}"
            self._hist["step"].append(step + 1)
            self._hist["train"].append(value)
            self._hist["lr"].append(lr)
            if self._watch(value):
                factor, window = self.config.divergence_test  # type: ignore[misc]
                return (f"loss {value:.3g} at step {step + 1} has stayed above {factor:g} x "
                        f"the first loss {self._reference:.3g} for {window} steps")
            if self.scheduler is not None:
                self.scheduler.step(value)
        return None

    def _watch(self, value: float) -> bool:
        """Update the blow-up test with the next recorded loss; True when it fires."""
        if self._reference is None:
            self._reference = value
            return False
        test = self.config.divergence_test
        if test is None or self._reference <= 0:  # a zero first loss gives no scale
            self._streak = 0
            return False
        factor, window = test
        self._streak = self._streak + 1 if value > factor * self._reference else 0
        return self._streak >= window

    # -- checkpoints --------------------------------------------------------------------
    def _settings(self) -> dict[str, Any]:
        """What a checkpoint records and a resumed run must match (JSON values)."""
        config = asdict(self.config)
        settings = {key: config[key] for key in RESUME_SETTINGS}
        settings.update({key: getattr(self.op, key) for key in INIT_SETTINGS})
        settings.update(train_seed=self.train_seed, sampler=_describe_sampler(self.sampler),
                        operator=describe_operator(self.op))
        return json.loads(json.dumps(settings, default=_json_default))

    def save_checkpoint(self, path: str | Path) -> Path:
        """Write parameters, optimiser, scheduler, random stream and history, atomically.

        The metadata also records the settings of :data:`RESUME_SETTINGS`, the
        operator's :data:`INIT_SETTINGS`, the training seed, the sampler and the
        operator's architecture
        (:func:`~ddops.io.describe_operator`), which :meth:`load_checkpoint`
        compares, and the changes accepted so far (``changed_settings``).

        Raises
        ------
        RuntimeError
            After the run has diverged (a diverged state is never checkpointed).
        """
        if self.diverged is not None:
            raise RuntimeError(f"not writing checkpoint {str(path)!r}: {self.diverged}")
        arrays: dict[str, Any] = {"theta": to_numpy(self.op.theta)}
        for key, value in self.optimizer.state_dict().items():
            arrays["opt_" + key] = np.asarray(value)
        if self.scheduler is not None:
            for key, value in self.scheduler.state_dict().items():
                arrays["sched_" + key] = np.asarray(value)
        for key, value in self.history.items():
            arrays["hist_" + key] = value
        settings = self._settings()
        meta = {"format": CHECKPOINT_FORMAT, "step": self.step,
                "train_seed": settings.pop("train_seed"), "rng": self.rng.bit_generator.state,
                "seconds": self.seconds, "config": asdict(self.config),
                "num_params": int(self.op.theta.size), "sampler": settings.pop("sampler"),
                "operator": settings.pop("operator"),
                **{key: settings.pop(key) for key in INIT_SETTINGS},
                "changed_settings": self.changed_settings}
        arrays["meta"] = np.array(json.dumps(meta, default=_json_default))
        return atomic_savez(path, **arrays)

    def load_checkpoint(self, path: str | Path, allow_changes: bool = False) -> dict[str, list]:
        """Restore a checkpoint written by :meth:`save_checkpoint` (validated, no pickle).

        The checkpoint must have been written with this run's settings: every
        field of :data:`RESUME_SETTINGS` (``steps`` only when it is smaller than the
        checkpoint's: a larger one continues the run), the operator's
        :data:`INIT_SETTINGS`, ``train_seed``,
        the sampler (its ``repr``, or its class when it has none) and the
        operator's architecture (:func:`~ddops.io.describe_operator`: class,
        decomposition, ranks, coarse basis, partition, tying, base, dtype,
        initialisation, seed, number of parameters).  A setting that a
        checkpoint does not record (a file of an older version) counts as
        changed, except ``lr_scaling`` and the :data:`INIT_SETTINGS`, which
        such a file can only have had at their defaults.

        With ``allow_changes=True`` differing settings are accepted and
        recorded: this run's settings apply from the checkpoint's step on
        (a changed ``lr`` restarts at this run's rate, a changed ``train_seed``
        restarts the training stream from this run's seed, changed optimiser
        and scheduler constants replace the stored ones; the parameters always
        come from the checkpoint).  A larger ``steps`` continues a run without
        ``allow_changes`` and is not recorded as a change (nothing depends on the
        total: the scheduler watches plateaus of the loss): the parameters and the
        training losses equal those of an uninterrupted run of the new length (with
        the same ``log_every``; the validation history also holds the old run's
        final evaluation when ``val_every`` does not divide its ``steps``).
        Changes accepted by an earlier resume, which the checkpoint records,
        are kept (``[first old value, newest value]``).

        Parameters
        ----------
        path : path-like
            The checkpoint.
        allow_changes : bool
            Accept differing settings instead of refusing them.

        Returns
        -------
        dict
            ``{setting: [old, new]}``, also kept as :attr:`changed_settings` and
            reported in :class:`TrainingResult`; empty when nothing changed.

        Raises
        ------
        ValueError
            One line naming the file: it is missing, damaged or not a checkpoint
            (see :func:`ddops.io.read_npz`), its contents are inconsistent, it
            was written with other settings (naming each, with the old and new
            value; a :class:`ChangedSettingsError`) and ``allow_changes`` is false,
            it holds a different number of parameter values, or it is past this
            run's ``steps``.
        """
        name = f"checkpoint {str(path)!r}"
        meta, data = read_npz(path, "checkpoint", required=("theta",),
                              meta_keys=("step", "rng", "seconds"))
        step, seconds = _check_progress(meta, name)
        history = _check_history(data, step, name)
        rng = type(self.rng.bit_generator)()
        try:
            rng.state = meta["rng"]
        except (TypeError, ValueError, KeyError) as exc:
            raise ValueError(f"{name}: the random stream state is unusable ({exc})") from exc
        diffs = self._compare(meta)
        theta = data["theta"]
        if theta.shape != self.op.theta.shape:
            arch = [d for d in diffs if d[0].startswith("operator")]
            raise ValueError(f"{name} holds {theta.size} parameter values, this operator has "
                             f"{self.op.theta.size}"
                             + (": " + _differences("it", arch) if arch else ""))
        check_parameter_vector(theta, self.op.theta.shape, name)
        if diffs and not allow_changes:
            text = _differences(name, diffs)
            raise ChangedSettingsError(text + " (allow changed settings to continue anyway)",
                                       text)
        if step > self.config.steps:
            raise ValueError(f"{name} is at step {step}, beyond this run's "
                             f"steps={self.config.steps}; ask for at least {step} steps")
        differing = {key for key, _, _ in diffs}
        changed = {key: [_plain(old), _plain(new)] for key, old, new in diffs}
        earlier = meta.get("changed_settings") or {}
        if isinstance(earlier, dict):
            for key, pair in earlier.items():
                if isinstance(pair, list) and len(pair) == 2:
                    changed[key] = [pair[0], changed[key][1] if key in changed else pair[1]]
        backup = self._snapshot()
        try:
            self._restore(data, meta, changed, diffs)
        except (TypeError, ValueError) as exc:
            self._rollback(backup)
            raise ValueError(f"{name}: the optimiser or scheduler state is unusable "
                             f"({exc})") from exc
        self.op.theta[...] = self.op.xp.asarray(theta, dtype=self.op.dtype)
        if "train_seed" in differing:
            self.rng = np.random.default_rng(self.train_seed)  # this run's stream from here
        else:
            self.rng.bit_generator.state = rng.state
        self.step = step
        self.seconds = seconds
        self._hist = history
        self._reference, self._streak = None, 0
        for value in history["train"]:
            self._watch(value)
        self.changed_settings = changed
        return dict(changed)

    def _compare(self, meta: dict[str, Any]) -> list[tuple[str, Any, Any]]:
        """``(setting, old, new)`` for every recorded setting that differs from this run."""
        mine = self._settings()
        config = meta.get("config")
        config = config if isinstance(config, dict) else {}
        saved = {key: config.get(key, _DEFAULT_IF_UNRECORDED.get(key, _MISSING))
                 for key in RESUME_SETTINGS}
        for key in INIT_SETTINGS:
            saved[key] = meta.get(key, _DEFAULT_IF_UNRECORDED[key])
        for key in ("train_seed", "sampler", "operator"):
            saved[key] = meta.get(key, _MISSING)
        if (isinstance(saved["steps"], int) and not isinstance(saved["steps"], bool)
                and mine["steps"] >= saved["steps"]):
            # a larger total continues the run: nothing depends on the total (the scheduler
            # watches plateaus, validation and checkpoints keep their own intervals); a
            # smaller one ends it before the end it was started for
            saved.pop("steps")
            mine.pop("steps")
        if not (mine["scheduler"] or saved["scheduler"] is True):
            for key in _PLATEAU:  # without a scheduler its constants do not matter
                saved.pop(key)
                mine.pop(key)
        return _differing(saved, mine)

    def _snapshot(self) -> tuple[Any, Any]:
        return (self.optimizer.state_dict(),
                None if self.scheduler is None else self.scheduler.state_dict())

    def _rollback(self, backup: tuple[Any, Any]) -> None:
        self.optimizer.load_state_dict(backup[0])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(backup[1])

    def _restore(self, data: dict[str, np.ndarray], meta: dict[str, Any],
                 changed: dict[str, list], diffs: list[tuple[str, Any, Any]]) -> None:
        """Optimiser and scheduler state from the checkpoint; this run's constants on top."""
        c, opt = self.config, self.optimizer
        state: dict[str, Any] = {k[4:]: v for k, v in data.items() if k.startswith("opt_")}
        differing = {d[0] for d in diffs}
        if "optimizer" in differing:  # Adam <-> AdamW: the moments carry over
            state["decoupled_weight_decay"] = np.asarray(opt.decoupled_weight_decay)
        opt.load_state_dict(state)
        opt.betas, opt.eps, opt.weight_decay = tuple(c.betas), c.eps, c.weight_decay
        if "lr_scaling" in differing:  # this run's multipliers from here on
            opt.set_lr_scale(self.lr_scale)
        if "lr" in differing:
            opt.lr = c.lr
        sched = {k[6:]: v for k, v in data.items() if k.startswith("sched_")}
        config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
        if config.get("scheduler", True) and "scheduler" not in differing and not sched:
            raise ValueError("the scheduler state is missing")
        if self.scheduler is not None and sched:
            self.scheduler.load_state_dict(sched)
            self.scheduler.factor = c.plateau_factor
            self.scheduler.patience = c.plateau_patience


def _check_sampler(sampler: Any, op: LowRankOperator) -> Any:
    """Refuse, at construction, a sampler without ``sample`` or of another size than ``op``.

    The size is the sampler's ``num_dofs`` (every :class:`~ddops.learning.data.BasisRHS`
    has it).  A sampler without one is checked on its first batch instead
    (:func:`_check_batch_size`): drawing here would change the state of a stateful one.
    """
    if not callable(getattr(sampler, "sample", None)):
        raise TypeError(f"sampler must have a method sample(batch_size, rng) -> (F, U), got "
                        f"{type(sampler).__name__}")
    size = getattr(sampler, "num_dofs", None)
    if size is not None:
        _check_batch_size(sampler, int(size), op)
    return sampler


def _check_batch_size(sampler: Any, size: int, op: LowRankOperator) -> None:
    if size != op.shape[0]:
        raise ValueError(f"sampler draws right-hand sides of size {size} "
                         f"({_describe_sampler(sampler)}) but the operator has size "
                         f"{op.shape[0]}")


def _describe_sampler(sampler: Any) -> str:
    """The sampler as a checkpoint records it: its ``repr``, or its class without one."""
    cls = type(sampler)
    return repr(sampler) if cls.__repr__ is not object.__repr__ else cls.__qualname__


def _differing(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """``(setting, old, new)`` where two records differ; nested dictionaries as ``a.b``."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key, value in new.items():
            out.extend(_differing(old.get(key, _MISSING), value, f"{prefix}{key}."))
        out.extend((f"{prefix}{key}", old[key], _ABSENT) for key in old if key not in new)
        return out
    if old is _MISSING or old != new:
        return [(prefix[:-1], old, new)]
    return []


def _show(value: Any) -> str:
    if value is _MISSING:
        return "<not recorded>"
    return "<none>" if value is _ABSENT else repr(value)


def _plain(value: Any) -> Any:
    """A compared value for ``changed_settings`` (``None`` for one that is not there)."""
    return None if value is _MISSING or value is _ABSENT else value


def _differences(name: str, diffs: list[tuple[str, Any, Any]]) -> str:
    """One line: ``<name> was written with a=1, b=2; this run has a=3, b=4``."""
    old = ", ".join(f"{k}={_show(v)}" for k, v, _ in diffs)
    new = ", ".join(f"{k}={_show(v)}" for k, _, v in diffs)
    sep = "; " if len(diffs) > 1 else ", "
    return f"{name} was written with {old}{sep}this run has {new}"


def _check_progress(meta: dict[str, Any], name: str) -> tuple[int, dict[str, float]]:
    """The step count and the timings of a checkpoint's metadata, checked."""
    step = meta["step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"{name}: metadata 'step' must be an integer >= 0, got {step!r}")
    seconds = meta["seconds"]
    if (not isinstance(seconds, dict) or set(seconds) != {"total", "data", "step"}
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                       and math.isfinite(v) for v in seconds.values())):
        raise ValueError(f"{name}: metadata 'seconds' must map total, data and step to "
                         f"finite numbers, got {seconds!r}")
    return step, {k: float(v) for k, v in seconds.items()}


def _check_history(data: dict[str, np.ndarray], step: int, name: str) -> dict[str, list]:
    """The history arrays of a checkpoint: present, one-dimensional, real, consistent."""
    keys = ("step", "train", "lr", "val_step", "val")
    missing = [f"hist_{k}" for k in keys if f"hist_{k}" not in data]
    if missing:
        raise ValueError(f"{name}: array {missing[0]!r} is missing (not a complete checkpoint)")
    h = {k: data[f"hist_{k}"] for k in keys}
    for k, a in h.items():
        kinds = "iu" if k.endswith("step") else "f"
        if a.ndim != 1 or a.dtype.kind not in kinds:
            raise ValueError(f"{name}: array 'hist_{k}' must be one-dimensional "
                             f"{'integer' if kinds == 'iu' else 'floating'}, got dtype "
                             f"{a.dtype} and shape {a.shape}")
    if not (h["step"].size == h["train"].size == h["lr"].size == step):
        raise ValueError(f"{name}: the history holds {h['step'].size} steps, {h['train'].size} "
                         f"losses and {h['lr'].size} rates, the metadata {step} steps")
    if h["val_step"].size != h["val"].size:
        raise ValueError(f"{name}: the history holds {h['val_step'].size} validation steps "
                         f"and {h['val'].size} validation losses")
    if not (np.all(np.isfinite(h["train"])) and np.all(np.isfinite(h["lr"]))):
        raise ValueError(f"{name}: the loss or rate history contains NaN or inf")
    return {k: a.tolist() for k, a in h.items()}
