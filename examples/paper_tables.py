"""Put the measured Tables 1 and 2 beside the paper's numbers (Markdown on stdout).

Run the experiments first (see docs/reproduction.md), then::

    python examples/paper_tables.py results/repro
"""

import argparse
import json
import sys
from pathlib import Path

# The paper's reported values (newer version, Tables 1 and 2).
PAPER_SWEEP = {  # lr -> model -> (train wMSE, val wMSE, Fro error)
    1e-4: {"schwarz": (2.587e-2, 2.612e-2, 0.0712), "global_r5": (6.149e-1, 6.086e-1, 0.263),
           "global_r39": (5.466e-2, 5.403e-2, 0.244)},
    3e-4: {"schwarz": (1.408e-3, 1.270e-3, 0.0697), "global_r5": (3.150e-1, 3.151e-1, 0.294),
           "global_r39": (2.564e-3, 2.549e-3, 0.226)},
    1e-3: {"schwarz": (6.293e-4, 5.594e-4, 0.0585), "global_r5": (2.419e-1, 2.429e-1, 0.193),
           "global_r39": (8.630e-4, 8.527e-4, 0.154)},
    3e-3: {"schwarz": (1.321e-4, 2.082e-4, 0.0474), "global_r5": (2.477e-1, 2.326e-1, 0.11),
           "global_r39": (3.102e-4, 3.189e-4, 0.116)},
    1e-2: {"schwarz": (1.604e-4, 2.258e-4, 0.0462), "global_r5": (2.391e-1, 2.361e-1, 0.0722),
           "global_r39": (3.097e-2, 2.980e-2, 0.265)},
    3e-2: {"schwarz": (6.487e-4, 5.899e-4, 0.0733), "global_r5": (2.489e-1, 2.548e-1, 0.144),
           "global_r39": (6.592e-1, 6.567e-1, 0.868)},
}
PAPER_SCALING = {  # n -> (#params, val wMSE, Fro error, best rank-r, rank bound)
    256: (2418, 5.594e-4, 5.846e-2, 2.488e-4, 39),
    512: (5138, 6.054e-4, 4.414e-2, 8.719e-5, 79),
    1024: (11346, 4.373e-4, 5.906e-2, 3.069e-5, 159),
    2048: (26834, 2.348e-4, 7.984e-2, 1.083e-5, 319),
    4096: (70098, 6.347e-4, 1.363e-1, 3.824e-6, 639),
    8192: (205778, 3.248e-3, 2.194e-1, 1.351e-6, 1279),
}


def load(path):
    return json.loads(Path(path).read_text())["rows"]


def fmt(value, spec):
    return value if isinstance(value, str) else format(value, spec)


def sweep_table(rows, paper=PAPER_SWEEP):
    out = ["| lr | model | train wMSE (ours / paper) | val wMSE (ours / paper) "
           "| Fro error (ours / paper) | best rank-r | seconds |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        p = paper.get(r["lr"], {}).get(r["model"]) if paper else None
        ps = p if p else ("-", "-", "-")
        out.append(
            f"| {r['lr']:g} | {r['model']} | {r['final_train_loss']:.3e} / {fmt(ps[0], '.3e')} "
            f"| {r['val_wmse']:.3e} / {fmt(ps[1], '.3e')} "
            f"| {r['operator_fro_error']:.3g} / {fmt(ps[2], '.3g')} "
            f"| {r['best_rank_fro_error']:.3e} | {r['train_seconds']:.1f} |")
    return "\n".join(out)


def scaling_table(rows):
    out = ["| n | N | #params (ours / paper) | val wMSE (ours / paper) | Fro error (ours / paper) "
           "| best rank-r (ours / paper) | rank bound | seconds |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = PAPER_SCALING.get(r["n"], ("-",) * 5)
        out.append(
            f"| {r['n']} | {r['N']} | {r['num_params']} / {p[0]} "
            f"| {r['val_wmse']:.3e} / {p[1]:.3e} | {r['operator_fro_error']:.3e} / {p[2]:.3e} "
            f"| {r['best_rank_fro_error']:.3e} / {p[3]:.3e} | {r['rank_bound']} "
            f"| {r['train_seconds']:.1f} |")
    return "\n".join(out)


def main(folder):
    folder = Path(folder)
    print("## v2 Table 1 (learning-rate sweep)\n")
    print(sweep_table(load(folder / "v2_sweep_metrics.json")))
    print("\n## v2 Table 2 (weak scaling)\n")
    print(scaling_table(load(folder / "v2_scaling_metrics.json")))
    v1 = folder / "v1_sweep_metrics.json"
    if v1.exists():
        print("\n## v1 settings: learning-rate sweep (paper values in docs/reproduction.md)\n")
        print(sweep_table(load(v1), paper=None))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default="results/repro",
                        help="folder with the v2 sweep and scaling metrics (default: %(default)s)")
    folder = Path(parser.parse_args().folder)
    missing = [f.name for f in (folder / "v2_sweep_metrics.json",
                                folder / "v2_scaling_metrics.json") if not f.exists()]
    if missing:
        sys.exit(f"paper_tables.py: {', '.join(missing)} not found in {folder}; run the "
                 "experiments first (docs/reproduction.md)")
    main(folder)
