"""Helpers shared by the ``ddops precond`` tests: run the command, count CG iterations."""

from __future__ import annotations

import json

import scipy.sparse.linalg as spla

from ddops.experiments.cli import main

#: No plots and no progress bars in the tests' runs.
QUIET = ["--no-plots", "--no-progress"]


def run(tmp_path, name, *argv, status=0):
    """``ddops precond *argv`` into ``tmp_path``: (payload, rows by method, table text).

    ``status``: the exit status expected (4: some rows refused or failed, the rest written).
    """
    prefix = str(tmp_path / name)
    assert main(["precond", *argv, "--save-prefix", prefix, *QUIET]) == status
    payload = json.loads((tmp_path / f"{name}_results.json").read_text())
    table = (tmp_path / f"{name}_table.md").read_text()
    return payload, {r["method"]: r for r in payload["rows"]}, table


def cg_iterations(A, b, M, rtol=1e-8):
    """scipy's CG iteration count (one callback per iteration), without the package's helper."""
    count = [0]

    def callback(xk):
        count[0] += 1

    _, info = spla.cg(A, b, rtol=rtol, maxiter=2 * A.shape[0], M=M, callback=callback)
    assert info == 0
    return count[0]
