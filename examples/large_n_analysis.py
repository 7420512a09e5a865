"""Why Schwarz attention loses accuracy at large n, and what the improved preset changes.

The measurements of the reproduction page's section "Beyond the paper"
(Markdown tables on stdout, everything also in ``--json``)::

    python examples/large_n_analysis.py scales --ns 256 1024 4096 8192 16384
    python examples/large_n_analysis.py parts --preset v2 --ns 256 1024 4096 8192
    python examples/large_n_analysis.py parts --preset improved --ns 8192 --probe-every 100
    python examples/large_n_analysis.py first-step --n 8192
    python examples/large_n_analysis.py plot results/v2/v2 results/v2/large \
        results/improved/improved results/improved/large --output docs/_static/val_vs_n.png

``scales``: the natural entry size of the factors (``sigma``, from
:mod:`ddops.learning.initialisation`) beside the paper's initialisation,
Adam's step ``lr`` and the gradients at the paper's initialisation, and the
share of the local part ``L*`` in the solutions of the data.  ``parts``:
training (2000 steps, batch 256, N = n/32) with the errors of the local and
coarse parts against the exact decomposition ``A^{-1} = C* + L*``,
``C* = Phi (Phi^T A Phi)^{-1} Phi^T``, ``L* = A^{-1} - C*`` (in 1D with
interface hats ``L*`` is block-diagonal: the Dirichlet inverses of the
non-overlapping interiors), on 32 Rademacher probes ("rad") and on the 32
Fourier modes of the data ("data").  ``first-step``: what one Adam step does
to the problem initialisation with and without the learning-rate scaling.
``plot``: validation wMSE against n for both presets and the paper's Table 2.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from ddops.experiments.compare import (
    PRESETS,
    ExperimentConfig,
    build_models,
    build_problem,
)
from ddops.learning.initialisation import coarse_scale, local_scales
from ddops.learning.training import Trainer, TrainingConfig
from ddops.operators import init_scale
from ddops.operators.losses import loss_value

#: The paper's Table 2 (newer version): n -> validation wMSE.
PAPER_VAL = {256: 5.594e-4, 512: 6.054e-4, 1024: 4.373e-4, 2048: 2.348e-4, 4096: 6.347e-4,
             8192: 3.248e-3}


def config(n: int, preset: str, **changes) -> ExperimentConfig:
    """The ``ddops scaling`` setting of one size (N = n / 32, Schwarz only)."""
    return ExperimentConfig(n=n, subdomains=n // 32, global_ranks=(), progress=False,
                            **{**PRESETS[preset], **changes}).validated()


def trainer(c: ExperimentConfig, prob=None, op=None) -> Trainer:
    prob = build_problem(c) if prob is None else prob
    op = build_models(c, prob.decomposition, prob.A)["schwarz"] if op is None else op
    tcfg = TrainingConfig(steps=c.steps, batch_size=c.batch_size, lr=c.lr, loss=c.loss,
                          optimizer=c.optimizer, scheduler=c.scheduler, progress=False,
                          val_every=c.val_every, lr_scaling=c.lr_scaling)
    return Trainer(op, prob.sampler, tcfg, train_seed=c.train_seed, validation=prob.validation,
                   A=prob.A if c.lr_scaling == "problem" else None)


def rms(x) -> float:
    return float(np.sqrt(np.mean(np.square(x))))


def val_wmse(op, prob) -> float:
    Fv, Uv = prob.validation
    return float(loss_value("wmse", op.matmat(Fv), Uv))


class Yardstick:
    """The exact parts ``C* X`` and ``L* X`` on the probe sets."""

    def __init__(self, prob, op, probes: int = 32, seed: int = 123) -> None:
        Phi = sp.csr_matrix(op.coarse_matrix)
        S = splu((Phi.T @ prob.A @ Phi).tocsc())
        rng = np.random.default_rng(seed)
        self.sets = {"rad": rng.choice([-1.0, 1.0], size=(prob.A.shape[0], probes)),
                     "data": np.asarray(prob.sampler.basis)}
        self.exact = {}
        for name, X in self.sets.items():
            full = prob.solver.solve(X)
            coarse = Phi @ S.solve(np.asarray(Phi.T @ X))
            self.exact[name] = {"full": full, "coarse": coarse, "local": full - coarse}

    def errors(self, op) -> dict[str, float]:
        parts = {"full": op, "local": op.local_part(), "coarse": op.coarse_part()}
        out = {}
        for name, X in self.sets.items():
            for part, P in parts.items():
                E = self.exact[name][part]
                out[f"{name}_{part}"] = float(np.linalg.norm(np.asarray(P.matmat(X)) - E)
                                              / np.linalg.norm(E))
        return out


def scales(ns, lr: float = 1e-3) -> list[dict]:
    rows = []
    for n in ns:
        c = config(n, "v2")
        prob = build_problem(c)
        op = build_models(c, prob.decomposition)["schwarz"]
        d, h = prob.decomposition, prob.decomposition.h
        s_loc, s0 = float(local_scales(op, prob.A).mean()), coarse_scale(op, prob.A)
        init_loc, init0 = init_scale("scaled", h, op.local_rank), init_scale("scaled", h,
                                                                           op.coarse_rank)
        F, U = prob.sampler.sample(256, np.random.default_rng(4711))
        _, g = op.value_and_grad(F, U)
        g_loc = np.concatenate([np.concatenate(g[k]).ravel() for k in ("Q", "K")])
        g0 = np.concatenate([g[k].ravel() for k in ("Q0", "K0")])
        y = Yardstick(prob, op, probes=1)
        E = y.exact["data"]
        rows.append(dict(n=n, N=d.num_subdomains, sigma_local=s_loc, init_local=init_loc,
                         sigma_coarse=s0, init_coarse=init0, lr=lr, grad_local=rms(g_loc),
                         grad_coarse=rms(g0),
                         local_share=float(np.linalg.norm(E["local"])
                                           / np.linalg.norm(E["full"]))))
        r = rows[-1]
        print(f"| {n} | {r['sigma_local']:.2e} | {init_loc:.2e} | {init_loc / s_loc:.1f} "
              f"| {s0:.2e} | {init0:.2e} | {init0 / s0:.1f} | {lr / s_loc:.2f} | {lr / s0:.2f} "
              f"| {r['grad_local']:.2g} | {r['grad_coarse']:.2g} | {r['local_share']:.1e} |",
              flush=True)
    return rows


def parts(ns, preset: str, probe_every: int, steps: int) -> list[dict]:
    rows = []
    for n in ns:
        c = config(n, preset, steps=steps)
        prob = build_problem(c)
        t = trainer(c, prob)
        y = Yardstick(prob, t.op)
        curve = [dict(step=0, val=val_wmse(t.op, prob), **y.errors(t.op))]
        every = probe_every or c.steps
        while t.step < c.steps:
            result = t.run(min(c.steps, t.step + every))
            curve.append(dict(step=t.step, val=val_wmse(t.op, prob), **y.errors(t.op)))
            if result.status != "finished":
                break
        last = curve[-1]
        rows.append(dict(n=n, preset=preset, status=result.status, curve=curve, **last))
        print(f"| {n} | {preset} | {last['rad_local']:.2g} | {last['data_local']:.2g} "
              f"| {last['rad_coarse']:.2g} | {last['data_coarse']:.2g} "
              f"| {last['data_full']:.2g} | {last['val']:.2e} |", flush=True)
    return rows


def first_step(n: int) -> dict:
    """Validation wMSE of the problem initialisation, then after one step with and without R."""
    out = {}
    for tag, preset, changes in (("G+P, plain Adam lr 1e-3", "v2",
                                  dict(coarse_init="galerkin", local_init="problem")),
                                 ("G+P+R, lr 0.1 (improved)", "improved", {})):
        c = config(n, preset, **changes)
        prob = build_problem(c)
        t = trainer(c, prob)
        before = val_wmse(t.op, prob)
        t.run(1)
        out[tag] = dict(initial=before, after_one_step=val_wmse(t.op, prob))
        print(f"| {tag} | {before:.2e} | {out[tag]['after_one_step']:.2e} |", flush=True)
    return out


def plot(prefixes, output) -> None:
    """``plot_scaling`` of the given ``ddops scaling`` runs, one line per preset, and the paper."""
    from ddops.experiments.plotting import plot_scaling

    rows = []
    for prefix in prefixes:
        payload = json.loads(Path(f"{prefix}_scaling_metrics.json").read_text())
        config = payload["config"]
        preset = next((name for name, values in PRESETS.items() if name != "v2"
                       and all(config.get(k) == v for k, v in values.items())), "v2")
        rows += [dict(r, model=f"ddops --preset {preset}") for r in payload["rows"]]
    rows += [dict(n=n, val_wmse=v, model="paper Table 2 (v2)") for n, v in PAPER_VAL.items()]
    rows.sort(key=lambda r: (r["model"], r["n"]))
    print(plot_scaling(rows, output, title="validation wMSE and operator error against n "
                                           "(N = n/32, 2000 steps)"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("scales")
    p.add_argument("--ns", type=int, nargs="+", default=[256, 1024, 4096, 8192, 16384])
    p = sub.add_parser("parts")
    p.add_argument("--ns", type=int, nargs="+", default=[256, 1024, 4096, 8192])
    p.add_argument("--preset", choices=("v2", "improved"), default="v2")
    p.add_argument("--probe-every", type=int, default=0, help="0: only at the end")
    p.add_argument("--steps", type=int, default=2000)
    p = sub.add_parser("first-step")
    p.add_argument("--n", type=int, default=8192)
    p = sub.add_parser("plot")
    p.add_argument("prefixes", nargs="+", help="ddops scaling --save-prefix values")
    p.add_argument("--output", default="val_vs_n.png")
    for p in sub.choices.values():
        p.add_argument("--json", help="write the measurements here")
    args = ap.parse_args()
    if args.what == "scales":
        print("| n | sigma_loc | paper init | ratio | sigma_0 | paper init | ratio | lr/sigma_loc "
              "| lr/sigma_0 | RMS grad local | RMS grad coarse | L* share of data |")
        print("|---" * 12 + "|")
        result = scales(args.ns)
    elif args.what == "parts":
        print("| n | preset | rad local | data local | rad coarse | data coarse | data full "
              "| val wMSE |")
        print("|---" * 8 + "|")
        result = parts(args.ns, args.preset, args.probe_every, args.steps)
    elif args.what == "first-step":
        print("| start | val wMSE at init | after one step |\n|---|---|---|")
        result = first_step(args.n)
    else:
        plot(args.prefixes, args.output)
        return
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
