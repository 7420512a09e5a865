"""Data-parallel training with MPI: every rank trains on its columns of the same batch.

:class:`DataParallelTrainer` is a :class:`ddops.learning.training.Trainer`
whose step is split over the ranks of a communicator.  Every rank holds the
whole operator and the whole optimiser state; per step:

* every rank draws the same global batch from the same random stream (the
  training seed), so the stream, and therefore a checkpoint, does not depend
  on the number of ranks.  With a :class:`~ddops.learning.data.BasisRHS`
  (``FourierRHS``, ``GridFourierRHS``, ``MatrixRHS``, with the stock ``sample``)
  only the small coefficient matrix of the batch is drawn and every rank forms
  its own columns of ``F`` and ``U``; a sampler with a method
  ``sample_columns(batch_size, rng, start, stop)`` (columns ``start:stop`` of
  the batch ``sample(batch_size, rng)`` would return, drawing the same random
  numbers) is asked for the rank's columns; any other sampler draws the whole
  batch and every rank keeps its columns;
* rank ``k`` of ``P`` takes the contiguous columns ``[k B / P, (k + 1) B / P)``
  and computes their loss and flat gradient with the operator's
  ``value_and_grad_flat``, weighted by its share of the columns, ``B_k / B``
  (every loss is a mean over the columns, so the weighted sum is the loss of
  the whole batch whatever the split);
* one ``Allreduce`` sums the flat gradient and the loss (one buffer of
  ``num_params + 1`` numbers);
* every rank applies the same optimiser update to the same parameters, so the
  parameters and the optimiser state stay identical on every rank (checked at
  every checkpoint and at the end of a run, see :meth:`DataParallelTrainer.verify_replicas`).

The loop, the scheduler, the blow-up test, the history and the checkpoint
format are the serial trainer's: the result equals serial training up to the
rounding of the summation order, and a checkpoint written with ``P`` ranks
resumes with any other number of ranks, or in a serial :class:`Trainer`.
Rank 0 writes checkpoints (atomically); every rank learns whether the write
succeeded, so a failed write raises the same error everywhere instead of
leaving the other ranks waiting.

:func:`run_compare` runs the ``ddops compare`` experiment this way.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..learning.training import Trainer, TrainingConfig, TrainingResult
from ..operators import LowRankOperator
from ..operators.losses import loss_value
from .comm import abort, world

__all__ = ["EXIT_OUTPUT", "DataParallelTrainer", "column_bounds", "run_compare"]


def column_bounds(batch_size: int, size: int) -> list[int]:
    """Column boundaries of the ranks: rank ``k`` owns ``[b[k], b[k + 1])``.

    ``b[k] = k * batch_size // size``: the split differs by at most one
    column between ranks, and is the same contiguous split the serial
    trainer's ``workers`` use.
    """
    return [k * batch_size // size for k in range(size + 1)]


class DataParallelTrainer(Trainer):
    """A :class:`~ddops.learning.training.Trainer` whose batches are split over MPI ranks.

    Every rank constructs the same operator (same seed) and a
    ``DataParallelTrainer`` with the same arguments, then calls :meth:`run`
    (and optionally :meth:`load_checkpoint`) collectively.

    Parameters
    ----------
    op, sampler, config, train_seed, validation, checkpoint, loss_weight, A
        As for :class:`~ddops.learning.training.Trainer`; identical on every
        rank.  ``config.workers`` must be 1 (the ranks split the batch), and
        ``config.batch_size`` at least the number of ranks.  The progress bar
        is shown on rank 0 only.
    comm : mpi4py communicator, optional
        The ranks that share the batch (default ``MPI.COMM_WORLD``).

    Raises
    ------
    ValueError
        ``workers > 1``, a batch smaller than the number of ranks, or an
        operator that is not on the numpy backend.

    Notes
    -----
    The validation loss is split the same way (every rank evaluates its
    columns of the validation set, one ``Allreduce``).  Every rank keeps the
    whole history, so :meth:`run` returns the same
    :class:`~ddops.learning.training.TrainingResult` everywhere (the timings
    are each rank's own).
    """

    def __init__(self, op: LowRankOperator, sampler: Any, config: TrainingConfig | None = None,
                 train_seed: int = 4711, validation: tuple[Any, Any] | None = None,
                 checkpoint: str | Path | None = None, loss_weight: Any = None,
                 A: Any = None, *, comm: Any = None) -> None:
        super().__init__(op, sampler, config, train_seed=train_seed, validation=validation,
                         checkpoint=checkpoint, loss_weight=loss_weight, A=A)
        self.comm = world() if comm is None else comm
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        c = self.config
        if c.workers != 1:
            raise ValueError(f"workers must be 1 in data-parallel training (the ranks split the "
                             f"batch), got workers={c.workers}")
        if c.batch_size < self.size:
            raise ValueError(f"batch_size ({c.batch_size}) must be at least the number of MPI "
                             f"ranks ({self.size})")
        if op.xp is not np:
            raise ValueError("data-parallel training needs the numpy backend (the gradient is "
                             "reduced through host memory)")
        if self.rank != 0:
            self.config.progress = False  # not a resume setting: one progress bar per job
        bounds = column_bounds(c.batch_size, self.size)
        self.columns = (bounds[self.rank], bounds[self.rank + 1])
        #: This rank's share of every batch, ``B_k / B``.
        self.weight = (self.columns[1] - self.columns[0]) / c.batch_size
        m = int(op.theta.size)
        # one buffer: the flat gradient and, behind it, the loss: one Allreduce per step
        self._reduced = np.empty(m + 1, dtype=op.dtype)
        self._grad = self._reduced[:m]
        self._local: tuple[Any, Any] | None = None  # this rank's (F, U) columns, reused

    # -- one step ---------------------------------------------------------------------
    def _value_and_grad(self, pool: Any) -> tuple[Any, Any, float]:
        """This rank's columns: loss and gradient weighted by ``B_k / B``, summed over ranks."""
        c, op = self.config, self.op
        lo, hi = self.columns
        t0 = time.perf_counter()
        if self._blockwise_sampler():
            # the coefficients of the whole batch (the serial stream), this rank's columns only
            C = self.sampler.sample_coefficients(c.batch_size, self.rng)
            if self._local is None:
                shape = (op.shape[0], hi - lo)
                self._local = (np.empty(shape, dtype=op.dtype), np.empty(shape, dtype=op.dtype))
            F, U = self.sampler.synthesize(C[:, lo:hi], out=self._local)
        elif callable(getattr(self.sampler, "sample_columns", None)):
            F, U = self.sampler.sample_columns(c.batch_size, self.rng, lo, hi)
            F = np.ascontiguousarray(F, dtype=op.dtype)
            U = np.ascontiguousarray(U, dtype=op.dtype)
        else:
            F, U = self._sample()
            F = np.ascontiguousarray(F[:, lo:hi], dtype=op.dtype)
            U = np.ascontiguousarray(U[:, lo:hi], dtype=op.dtype)
        data_seconds = time.perf_counter() - t0
        value, _ = op.value_and_grad_flat(F, U, c.loss, out=self._grad, check=False,
                                          loss_weight=self.loss_weight)
        self._grad *= self.weight
        self._reduced[-1] = value * self.weight
        self.comm.Allreduce(_in_place(), self._reduced)
        return self._reduced[-1].copy(), self._grad, data_seconds

    def validation_loss(self) -> float:
        """The validation loss, every rank evaluating its columns (one ``Allreduce``).

        Equal to the serial :meth:`~ddops.learning.training.Trainer.validation_loss`
        up to rounding; NaN without a validation set.
        """
        if self.validation is None:
            return float("nan")
        Fv, Uv = self.validation
        bounds = column_bounds(Fv.shape[1], self.size)
        lo, hi = bounds[self.rank], bounds[self.rank + 1]
        part = np.zeros(1)
        if hi > lo:
            part[0] = float(loss_value(self.config.loss, self.op._apply(Fv[:, lo:hi], False),
                                       Uv[:, lo:hi], weight=self.loss_weight))
            part[0] *= (hi - lo) / Fv.shape[1]
        self.comm.Allreduce(_in_place(), part)
        return float(part[0])

    def run(self, steps: int | None = None) -> TrainingResult:
        """Train collectively (see :meth:`Trainer.run`); the replicas are checked at the end."""
        result = super().run(steps)
        self.verify_replicas()
        return result

    # -- replicas and checkpoints ---------------------------------------------------------
    def replica_digest(self) -> tuple[int, ...]:
        """Checksums of this rank's parameters, optimiser and scheduler state and stream.

        Every array is read once as machine words (their sum modulo ``2^64`` and
        their exclusive or: any flipped bit changes the result), at memory speed.
        """
        opt = self.optimizer
        arrays = [self.op.theta, *opt.exp_avg, *opt.exp_avg_sq]
        small = (opt.step_count, opt.lr, self.rng.bit_generator.state,
                 None if self.scheduler is None else self.scheduler.state_dict())
        words = tuple(w for a in arrays for w in _word_digest(a))
        return (*words, zlib.crc32(repr(small).encode()))

    def verify_replicas(self) -> None:
        """Check that every rank holds the same parameters, optimiser state and stream.

        Raises
        ------
        RuntimeError
            On every rank, naming the ranks that differ from rank 0 (the
            reduction of some MPI library returned different bits on
            different ranks).
        """
        digests = self.comm.allgather(self.replica_digest())
        bad = [k for k, d in enumerate(digests) if d != digests[0]]
        if bad:
            raise RuntimeError(f"data-parallel replicas differ: ranks {bad} hold other "
                               f"parameters or optimiser state than rank 0")

    def save_checkpoint(self, path: str | Path) -> Path:
        """Rank 0 writes the checkpoint (atomically); collective.

        The file is the serial trainer's checkpoint: it holds no rank-dependent
        state.  Every rank raises the same error when the write fails.
        """
        self.verify_replicas()
        return Path(_on_root(self.comm, lambda: Trainer.save_checkpoint(self, path)))

    def load_checkpoint(self, path: str | Path, allow_changes: bool = False) -> dict[str, list]:
        """Every rank reads the checkpoint (see :meth:`Trainer.load_checkpoint`); collective.

        When it fails on any rank (a file that one rank cannot see, for
        example), every rank raises; a checkpoint written with any number of
        ranks, or by a serial trainer, is accepted.
        """
        def load() -> dict[str, list]:
            return Trainer.load_checkpoint(self, path, allow_changes=allow_changes)

        changed = _everywhere(self.comm, load)
        self.verify_replicas()
        return changed


def _word_digest(array: Any) -> tuple[int, int]:
    """Sum (modulo ``2^64``) and exclusive or of an array's bytes read as machine words."""
    data = np.ascontiguousarray(array).reshape(-1)
    words = data.view(np.uint64 if data.itemsize == 8 else np.uint32)
    return (int(np.add.reduce(words, dtype=np.uint64)), int(np.bitwise_xor.reduce(words)))


def _in_place() -> Any:
    from .comm import mpi

    return mpi().IN_PLACE


def _error_record(exc: BaseException) -> tuple[str, str]:
    kind = type(exc).__name__
    return (kind if kind in _RAISABLE else "RuntimeError", str(exc))


_RAISABLE: dict[str, type[Exception]] = {"OSError": OSError, "ValueError": ValueError,
                                         "TypeError": TypeError, "RuntimeError": RuntimeError,
                                         "FileNotFoundError": FileNotFoundError,
                                         "PermissionError": PermissionError}


def _on_root(comm: Any, action: Callable[[], Any]) -> Any:
    """Run ``action`` on rank 0; every rank returns its result or raises its error."""
    result, error = None, None
    if comm.Get_rank() == 0:
        try:
            result = action()
        except Exception as exc:  # noqa: BLE001 - told to every rank, then raised there
            error = _error_record(exc)
            comm.bcast((None, error), root=0)
            raise
    result, error = comm.bcast((result, error), root=0)
    if error is not None:
        raise _RAISABLE[error[0]](error[1])
    return result


def _everywhere(comm: Any, action: Callable[[], Any]) -> Any:
    """Run ``action`` on every rank; when it fails anywhere, every rank raises."""
    result, error = None, None
    try:
        result = action()
    except Exception as exc:  # noqa: BLE001 - told to every rank, then raised there
        error = exc
    errors = comm.allgather(None if error is None else _error_record(error))
    if error is not None:
        raise error
    failed = [(k, e) for k, e in enumerate(errors) if e is not None]
    if failed:
        rank, (kind, message) = failed[0]
        raise _RAISABLE[kind](f"rank {rank}: {message}")
    return result


# -- ddops compare ----------------------------------------------------------------------------
#: Exit status of a job whose result could not be written during the run (as ``ddops``).
EXIT_OUTPUT = 3


def run_compare(config: Any, log: Callable[[str], Any] = print,
                comm: Any = None, written: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """``ddops compare`` with data-parallel training; call it on every rank.

    The experiment of :func:`ddops.experiments.compare.run_compare` with every
    model trained by a :class:`DataParallelTrainer`: the same metrics, files
    and checkpoints as a serial run (equal up to rounding).  Rank 0 logs and
    writes every file; the other ranks train and evaluate alongside it, write
    nothing and print nothing (their standard output and error are silenced
    for the rest of the process, so that the command line's lines appear once).

    Parameters
    ----------
    config : ExperimentConfig or argparse.Namespace
        The experiment (a namespace of the ``ddops compare`` flags is turned
        into a config the way the command line does).
    log : callable
        Where rank 0's progress lines go.
    comm : mpi4py communicator, optional
        Default ``MPI.COMM_WORLD``.
    written : list, optional
        Gets the paths of the files rank 0 writes (as in the serial experiment).

    Returns
    -------
    dict
        The metrics per model, on every rank.

    Raises
    ------
    ValueError, TypeError
        On every rank alike, before any training: a bad setting, an unusable
        output location (probed by rank 0, the verdict shared), a damaged
        checkpoint or one written with other settings (every rank reads it).

    Notes
    -----
    A failure once training has started cannot be raised on every rank (the
    others are inside a collective call), so it ends the job:
    ``ddops: error: <message>`` on stderr from rank 0, then ``MPI_Abort`` with
    status 3 when a result could not be written (the results so far are kept
    in the directory the message names, as in a serial run) and 1 otherwise.
    """
    from ..experiments import compare

    comm = world() if comm is None else comm
    root = comm.Get_rank() == 0
    if not root:
        _silence()
    if not isinstance(config, compare.ExperimentConfig):
        from ..experiments.cli import config_from_args

        config = config_from_args(config, "results/compare")
    c = config.validated()  # the same on every rank: each raises the same error
    if c.workers != 1:
        raise ValueError(f"workers must be 1 under MPI (the ranks split the batch), got "
                         f"workers={c.workers}")
    if c.batch_size < comm.Get_size():
        raise ValueError(f"batch_size ({c.batch_size}) must be at least the number of MPI "
                         f"ranks ({comm.Get_size()})")
    # the output location is probed once, by rank 0, and the verdict shared
    _on_root(comm, lambda: _check_prefix(compare, c))

    def factory(*args: Any, **kwargs: Any) -> DataParallelTrainer:
        return DataParallelTrainer(*args, comm=comm, **kwargs)

    # a checkpoint that cannot be written fails on every rank (DataParallelTrainer), and
    # the serial experiment then saves what it has elsewhere: the other ranks take part
    # in the collective checkpoint write only
    rescue = {} if root else dict(save_operator=_nothing, write_metrics=_nothing,
                                  write_history_csv=_nothing, rescue_outputs=_rescue_elsewhere)
    try:
        with _patched(compare, **rescue):
            return compare.run_compare(c, log if root else _nothing, trainer_factory=factory,
                                       write_results=root, written=written)
    except (ValueError, TypeError):
        raise  # settings and checkpoints: raised alike on every rank before any training
    except Exception as exc:  # noqa: BLE001 - one rank cannot raise alone: end the job
        output = isinstance(exc, compare.OutputError)
        if root:
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            print(f"ddops: error: {text}", file=sys.__stderr__, flush=True)
        elif output:
            comm.Barrier()  # rank 0 has the same error and the message; it ends the job
        else:
            print(f"ddops: rank {comm.Get_rank()} of {comm.Get_size()} failed: "
                  f"{type(exc).__name__}: {exc}", file=sys.__stderr__, flush=True)
        abort(comm, EXIT_OUTPUT if output else 1)


def _silence() -> None:
    """Send this rank's standard output and error to the null device (until it exits)."""
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - kept open until the process exits
    sys.stderr = sys.stdout


def _check_prefix(compare: Any, c: Any) -> None:
    compare.check_output_prefix(c.save_prefix, compare.compare_suffixes(c))


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


def _rescue_elsewhere(prefix: str, exc: OSError, write: Callable[[str], Any]) -> Any:
    """A non-root rank's part of a rescue: the collective writes, no files of its own."""
    from ..experiments.compare import OutputError

    write(prefix)  # joins rank 0's collective checkpoint write; writes nothing itself
    return OutputError(f"cannot write the results: {exc}; rank 0 saved them elsewhere", None)


@contextlib.contextmanager
def _patched(module: Any, **names: Any) -> Iterator[None]:
    """Replace module attributes for the duration of the block."""
    saved = {key: getattr(module, key) for key in names}
    try:
        for key, value in names.items():
            setattr(module, key, value)
        yield
    finally:
        for key, value in saved.items():
            setattr(module, key, value)
