"""Time per training step of ``--preset improved`` against the paper's ``--preset v2``.

Both trainers live in one process and are timed in interleaved blocks of
steps (v2, improved, v2, improved, ...), so that the load of a shared
machine affects both alike; the ratio of the medians is reported.  The
set-up of both (the problem initialisation and the learning-rate multipliers
of the improved preset) is outside the timed steps and reported apart.
``benchmarks/run.py`` runs this at n = 8192 as part of the suite::

    python benchmarks/presets.py --n 8192 --rounds 7 --steps 40 --json results/presets.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PRESET_NAMES = ("v2", "improved")


def _trainer(n: int, preset: str):
    """The ``ddops scaling`` Schwarz model of size n with a preset; and its set-up seconds."""
    from ddops.experiments.compare import (
        PRESETS,
        ExperimentConfig,
        build_models,
        build_problem,
    )
    from ddops.learning.training import Trainer, TrainingConfig

    c = ExperimentConfig(n=n, subdomains=n // 32, global_ranks=(), progress=False,
                         **PRESETS[preset]).validated()
    prob = build_problem(c)
    t0 = time.perf_counter()
    op = build_models(c, prob.decomposition, prob.A)["schwarz"]
    cfg = TrainingConfig(steps=10**9, batch_size=c.batch_size, lr=c.lr, loss=c.loss,
                         optimizer=c.optimizer, scheduler=c.scheduler, progress=False,
                         val_every=10**9, lr_scaling=c.lr_scaling)
    trainer = Trainer(op, prob.sampler, cfg, train_seed=c.train_seed,
                      A=prob.A if c.lr_scaling == "problem" else None)
    return trainer, time.perf_counter() - t0


def compare_presets(n: int = 8192, rounds: int = 7, steps: int = 40,
                    warm: int = 10) -> dict[str, Any]:
    """Median milliseconds per full training step of both presets and their ratio."""
    trainers, setup = {}, {}
    for name in PRESET_NAMES:
        trainers[name], setup[name] = _trainer(n, name)
        trainers[name].run(warm)  # allocate and touch every buffer
    times: dict[str, list[float]] = {name: [] for name in PRESET_NAMES}
    for _ in range(rounds):
        for name, t in trainers.items():
            before, start = dict(t.seconds), t.step
            t.run(start + steps)
            elapsed = (t.seconds["total"] - before["total"]) / (t.step - start)
            times[name].append(1e3 * elapsed)
    out: dict[str, Any] = {"n": n, "rounds": rounds, "steps_per_round": steps}
    for name, ts in times.items():
        out[name] = {"median_ms": float(np.median(ts)), "all_ms": ts, "setup_s": setup[name],
                     "final_loss": float(trainers[name].history["train"][-1])}
    out["ratio"] = out["improved"]["median_ms"] / out["v2"]["median_ms"]
    return out


def summary(result: dict[str, Any]) -> str:
    v2, imp = result["v2"], result["improved"]
    return (f"n={result['n']}: --preset improved {imp['median_ms']:.2f} ms/step, --preset v2 "
            f"{v2['median_ms']:.2f} ms/step (medians of {result['rounds']} interleaved blocks of "
            f"{result['steps_per_round']} steps), ratio {result['ratio']:.3f}; set-up "
            f"{imp['setup_s']:.2f} s vs {v2['setup_s']:.2f} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--json", metavar="PATH", default=None)
    args = p.parse_args(argv)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):  # as the Trainer's default
        result = compare_presets(args.n, args.rounds, args.steps)
    print(summary(result))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
