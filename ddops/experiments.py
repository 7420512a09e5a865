"""The paper's experiments: model comparison, learning-rate sweep, weak scaling.

Each experiment writes ``<prefix>_metrics.json`` (rewritten atomically after
every finished model, so finished work is never lost), a CSV of the training
histories, the trained operators (``.npz``) and PNG figures.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ._validation import check_choice, check_int
from .backend import to_numpy
from .data import RHS_MODES, FourierRHS
from .decomposition import Decomposition1D
from .io import atomic_write_json, atomic_write_text, save_operator
from .metrics import evaluate
from .operators import INITS, PARTITIONS, GlobalLowRankOperator, LowRankOperator, SchwarzOperator
from .problem import KINDS, PoissonSolver, grid_points, poisson_1d
from .training import LOSS_ALIASES, OPTIMIZERS, Trainer, TrainingConfig

__all__ = ["ExperimentConfig", "PRESETS", "SWEEP_LRS", "SCALING_NS", "run_compare", "run_sweep",
           "run_scaling"]

#: Losses of the operator-regression experiments (the energy loss needs a weight
#: matrix and belongs to preconditioner training).
REGRESSION_LOSSES = tuple(k for k in LOSS_ALIASES if k != "energy")

#: The learning rates of the paper's sweep (v2, Table 1).
SWEEP_LRS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
#: The problem sizes of the paper's weak-scaling study (v2, Table 2), N = n / 32.
SCALING_NS = (256, 512, 1024, 2048, 4096, 8192)


@dataclass
class ExperimentConfig:
    """Settings of one comparison run; the defaults are the paper's v2 main setting."""

    n: int = 256
    subdomains: int = 8
    overlap: int = 2
    kind: str = "element"
    local_rank: int = 4
    coarse_rank: int | None = None
    global_ranks: tuple[int, ...] = (39, 5)
    rhs_mode: str = "mixed_fourier"
    partition: str = "symmetric"
    loss: str = "wmse"
    steps: int = 2000
    coarse_basis: str = "interface_hats"
    lr: float = 1e-3
    save_prefix: str = "results/compare"
    seed: int = 0
    train_seed: int = 4711
    test_seed: int = 4712
    init: str = "scaled"
    batch_size: int = 256
    optimizer: str = "adamw"
    scheduler: bool = True
    val_size: int = 256
    eval_size: int = 16
    dtype: str = "float64"
    plots: bool = True
    progress: bool = True
    checkpoint_every: int = 0
    resume: bool = False
    exact_limit: int | None = None
    val_every: int = 50
    workers: int = 1

    def validated(self) -> ExperimentConfig:
        """Check every field; raise ``ValueError``/``TypeError`` naming the bad one."""
        c = replace(self, global_ranks=tuple(self.global_ranks))
        for name in ("n", "subdomains", "local_rank", "steps", "batch_size", "val_size",
                     "eval_size", "seed", "train_seed", "test_seed", "workers"):
            check_int(name, getattr(c, name), minimum=0 if "seed" in name else 1)
        check_int("overlap", c.overlap, minimum=0)
        check_choice("kind", c.kind, KINDS)
        check_choice("rhs_mode", c.rhs_mode, RHS_MODES)
        check_choice("partition", c.partition, tuple(PARTITIONS))
        check_choice("loss", c.loss, REGRESSION_LOSSES)
        check_choice("init", c.init, INITS)
        check_choice("optimizer", c.optimizer, OPTIMIZERS)
        check_choice("dtype", c.dtype, ("float64", "float32"))
        for r in c.global_ranks:
            check_int("global_rank", r, minimum=1)
        if c.coarse_rank is not None:
            check_int("coarse_rank", c.coarse_rank, minimum=1)
        if c.workers > c.batch_size:
            raise ValueError(f"workers ({c.workers}) must not exceed batch_size ({c.batch_size})")
        return c


#: Paper versions' default settings: v2 (newer, the default) and v1 (first version:
#: DOF-based, naive initialisation, global rank 40, requested coarse rank 8, Adam
#: without a scheduler).
PRESETS: dict[str, dict[str, Any]] = {
    "v2": {},
    "v1": dict(kind="dof", init="naive", global_ranks=(40, 5), coarse_rank=8, optimizer="adam",
               scheduler=False),
}


@dataclass
class Problem:
    """Everything shared by the models of one experiment."""

    decomposition: Decomposition1D
    A: Any
    solver: PoissonSolver
    sampler: FourierRHS
    validation: tuple[np.ndarray, np.ndarray]
    evaluation: tuple[np.ndarray, np.ndarray]
    x: np.ndarray


def build_problem(c: ExperimentConfig) -> Problem:
    """Decomposition, matrix, solver, training stream and the fixed test sets.

    The validation set (``val_size`` right-hand sides) and the evaluation set
    (``eval_size``) come from two independent streams spawned from ``test_seed``.
    """
    d = Decomposition1D(c.n, c.subdomains, c.overlap, c.kind)
    sampler = FourierRHS(c.n, c.kind, c.rhs_mode, dtype=c.dtype)
    val_rng, eval_rng = (np.random.default_rng(s)
                         for s in np.random.SeedSequence(c.test_seed).spawn(2))
    validation = tuple(to_numpy(a) for a in sampler.sample(c.val_size, val_rng))
    evaluation = tuple(to_numpy(a) for a in sampler.sample(c.eval_size, eval_rng))
    return Problem(d, poisson_1d(c.n, c.kind), PoissonSolver(c.n, c.kind), sampler,
                   validation, evaluation, grid_points(c.n, c.kind))


def build_models(c: ExperimentConfig, d: Decomposition1D) -> dict[str, LowRankOperator]:
    """The Schwarz attention model and one global baseline per requested rank."""
    models: dict[str, LowRankOperator] = {
        "schwarz": SchwarzOperator(d, c.local_rank, c.coarse_rank, c.coarse_basis, init=c.init,
                                   seed=c.seed, dtype=c.dtype, partition=c.partition)
    }
    for r in c.global_ranks:
        models[f"global_r{r}"] = GlobalLowRankOperator(d.num_dofs, r, init=c.init, seed=c.seed,
                                                       dtype=c.dtype, h=d.h)
    return models


def _write_history_csv(path: Path, histories: dict[str, dict[str, np.ndarray]]) -> None:
    rows = []
    for model, h in histories.items():
        val = dict(zip(h["val_step"].tolist(), h["val"].tolist()))
        for step, loss, lr in zip(h["step"].tolist(), h["train"].tolist(), h["lr"].tolist()):
            v = val.get(step)
            rows.append([model, step, repr(loss), "" if v is None else repr(v), repr(lr)])
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["model", "step", "train_loss", "val_loss", "lr"])
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def _plot_model(name: str, op: LowRankOperator, prob: Problem, prefix: str,
                dense_limit: int = 2048) -> list[str]:
    """The per-model figures; the matrix figures (dense ``n x n``) only up to ``dense_limit``."""
    from . import plotting

    Fe, Ue = prob.evaluation
    Pe = to_numpy(op.matmat(Fe))
    out = [plotting.plot_solutions(prob.x, Fe, Ue, Pe, f"{prefix}_{name}_solutions.png",
                                   title=f"{name}: evaluation right-hand sides")]
    n = op.shape[0]
    if n > dense_limit:
        return out
    exact = prob.solver.solve(np.eye(n))
    if isinstance(op, SchwarzOperator):
        Phi = op.coarse_matrix
        out.append(plotting.plot_operator_matrices(
            op.to_dense("local"), op.to_dense("coarse") if Phi is not None else None,
            op.to_dense(), exact, Phi, f"{prefix}_{name}_matrices.png", title=name))
        p = op.get_params()
        blocks = [q @ k.T for q, k in zip(p["Q"], p["K"])]
        coarse = p["Q0"] @ p["K0"].T if Phi is not None else None
        out.append(plotting.plot_learned_blocks(blocks, coarse, f"{prefix}_{name}_blocks.png",
                                                title=f"{name}: learned blocks"))
        if Phi is not None:
            out.append(plotting.plot_coarse_basis_transpose(
                Phi, f"{prefix}_{name}_phiT.png", title="coarse basis $\\Phi^T$"))
    else:
        out.append(plotting.plot_operator_matrices(None, None, op.to_dense(), exact, None,
                                                   f"{prefix}_{name}_matrices.png", title=name))
    return out


def run_compare(config: ExperimentConfig, log: Any = print) -> dict[str, dict[str, Any]]:
    """Train the Schwarz model and the global baselines on the same stream; write results.

    Returns the metrics per model (also written to ``<save_prefix>_metrics.json``).
    """
    c = config.validated()
    prefix = c.save_prefix
    metrics_path = Path(prefix + "_metrics.json")
    prob = build_problem(c)
    models = build_models(c, prob.decomposition)
    metrics: dict[str, dict[str, Any]] = {}
    if c.resume and metrics_path.exists():
        metrics = json.loads(metrics_path.read_text()).get("models", {})
    histories: dict[str, dict[str, np.ndarray]] = {}
    tcfg = TrainingConfig(steps=c.steps, batch_size=c.batch_size, lr=c.lr, loss=c.loss,
                          optimizer=c.optimizer, scheduler=c.scheduler, progress=c.progress,
                          checkpoint_every=c.checkpoint_every, val_every=c.val_every,
                          workers=c.workers)
    for name, op in models.items():
        ckpt = Path(f"{prefix}_{name}_checkpoint.npz")
        trainer = Trainer(op, prob.sampler, tcfg, train_seed=c.train_seed,
                          validation=prob.validation,
                          checkpoint=ckpt if c.checkpoint_every else None)
        if c.resume and ckpt.exists():
            trainer.load_checkpoint(ckpt)
            log(f"{name}: resumed from {ckpt} at step {trainer.step}")
        result = trainer.run()
        histories[name] = result.history
        entry = evaluate(op, prob.A, prob.solver.solve, prob.validation, prob.evaluation,
                         exact_limit=c.exact_limit)
        train = result.history["train"]
        entry.update(
            status=result.status,
            steps=result.steps,
            final_train_loss=float(train[-1]) if train.size else float("nan"),
            final_train_wmse=float(train[-1]) if train.size and tcfg.loss == "wmse" else None,
            val_wmse=entry.pop("val_loss"),
            train_seconds=result.seconds["total"],
            data_seconds=result.seconds["data"],
            lr=c.lr,
        )
        metrics[name] = entry
        save_operator(op, f"{prefix}_{name}.npz")
        _write_metrics(metrics_path, c, metrics)
        _write_history_csv(Path(prefix + "_history.csv"), histories)
        log(_summary_line(name, entry))
        if result.status != "finished":
            log(result.message)
    if c.plots:
        from . import plotting

        plotting.plot_training_curves(
            {k: h for k, h in histories.items()}, prefix + "_training_curves.png",
            title=f"n={c.n}, N={c.subdomains}, lr={c.lr:g}",
            ylabel="wMSE" if tcfg.loss == "wmse" else "MSE")
        for name, op in models.items():
            _plot_model(name, op, prob, prefix)
    return metrics


def _write_metrics(path: Path, c: ExperimentConfig, metrics: dict[str, Any]) -> None:
    atomic_write_json(path, {"config": asdict(c), "models": metrics})


def _summary_line(name: str, e: dict[str, Any]) -> str:
    return (f"{name:>12}: params={e['num_params']:>7d} rank<={e['rank_bound']:>5d} "
            f"train={e['final_train_loss']:.3e} val={e['val_wmse']:.3e} "
            f"fro={e['operator_fro_error']:.3e} best={e['best_rank_fro_error']:.3e} "
            f"time={e['train_seconds']:.1f}s")


def markdown_table(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> str:
    """A Markdown table from dict rows; ``columns`` are ``(key, header, format)``."""
    head = "| " + " | ".join(h for _, h, _ in columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = []
    for r in rows:
        cells = []
        for key, _, fmt in columns:
            v = r.get(key)
            cells.append("-" if v is None else format(v, fmt))
        body.append("| " + " | ".join(cells) + " |")
    return "\n".join([head, sep, *body]) + "\n"


def run_sweep(config: ExperimentConfig, lrs: tuple[float, ...] = SWEEP_LRS,
              log: Any = print) -> list[dict[str, Any]]:
    """Table 1: the comparison at every learning rate; Markdown table and figure."""
    rows = []
    for lr in lrs:
        tag = f"{lr:.0e}".replace("-0", "m").replace("+0", "")
        c = replace(config, lr=lr, save_prefix=f"{config.save_prefix}_lr{tag}")
        log(f"--- lr = {lr:g}")
        for name, e in run_compare(c, log).items():
            rows.append({"lr": lr, "model": name, **e})
    _write_table(config, rows, [("lr", "lr", "g"), ("model", "model", "s"),
                                ("final_train_loss", "train loss", ".3e"),
                                ("val_wmse", "val wMSE", ".3e"),
                                ("operator_fro_error", "Fro error", ".3g"),
                                ("best_rank_fro_error", "best rank-r", ".3e"),
                                ("train_seconds", "seconds", ".1f")], "sweep")
    return rows


def run_scaling(config: ExperimentConfig, ns: tuple[int, ...] = SCALING_NS,
                log: Any = print) -> list[dict[str, Any]]:
    """Table 2: Schwarz attention for growing n with N = n / 32; table and figure."""
    rows = []
    for n in ns:
        c = replace(config, n=n, subdomains=max(1, n // 32), global_ranks=(),
                    save_prefix=f"{config.save_prefix}_n{n}")
        log(f"--- n = {n}, N = {c.subdomains}")
        e = run_compare(c, log)["schwarz"]
        rows.append({"n": n, "N": c.subdomains, **e})
    _write_table(config, rows, [("n", "n", "d"), ("N", "N", "d"),
                                ("num_params", "#params", "d"),
                                ("val_wmse", "val wMSE", ".3e"),
                                ("operator_fro_error", "Fro error", ".3e"),
                                ("best_rank_fro_error", "best rank-r", ".3e"),
                                ("rank_bound", "rank bound", "d"),
                                ("train_seconds", "seconds", ".1f")], "scaling")
    return rows


def _write_table(config: ExperimentConfig, rows: list[dict[str, Any]],
                 columns: list[tuple[str, str, str]], what: str) -> None:
    """``<prefix>_<what>.md``, ``<prefix>_<what>_metrics.json`` and the figure ``plot_<what>``."""
    prefix = config.save_prefix
    atomic_write_text(Path(f"{prefix}_{what}.md"), markdown_table(rows, columns))
    atomic_write_json(Path(f"{prefix}_{what}_metrics.json"), {"config": asdict(config),
                                                              "rows": rows})
    if config.plots:
        from . import plotting

        getattr(plotting, f"plot_{what}")(rows, f"{prefix}_{what}.png")
