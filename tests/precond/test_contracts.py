"""TwoLevelSchwarz diagnostics name the culprit: a singular or indefinite local matrix is
reported with the subdomain that really contains the bad unknown, whatever its position and
whatever the local solver (and its fill-reducing permutation)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp

from ddops.dd.partition import decomposition_from_grid
from ddops.linalg.local_solvers import pardiso_available
from ddops.precond.schwarz import TwoLevelSchwarz


def laplacian_2d(n):
    T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1])
    eye = sp.identity(n)
    return (sp.kron(eye, T) + sp.kron(T, eye)).tocsr()


def broken(A, j, how):
    """A with unknown j made singular or indefinite: row and column j zeroed, kept as stored
    zeros ("zero") or dropped from the pattern ("drop"), or its diagonal negated."""
    M = A.toarray()
    if how == "negative":
        M[j, j] = -M[j, j]
        return sp.csr_matrix(M)
    M[j, :] = 0.0
    M[:, j] = 0.0
    if how == "drop":
        return sp.csr_matrix(M)
    B = A.copy().tocsr()  # same pattern, the values of M
    rows = np.repeat(np.arange(B.shape[0]), np.diff(B.indptr))
    B.data = M[rows, B.indices].copy()
    return B


def only_in(d, i):
    """An unknown that lies in subdomain i and in no other (from the subdomain lists)."""
    others = np.concatenate([s for k, s in enumerate(d.subdomains) if k != i])
    alone = np.setdiff1d(d.subdomains[i], others)
    assert alone.size
    return int(alone[alone.size // 2])


CASES = [(solver, how) for solver in ("dense", "superlu") for how in ("zero", "drop",
                                                                      "negative")]
if pardiso_available():
    # PARDISO needs every diagonal entry stored, and R_i A R_i^T loses exact zeros in the
    # sparse products: a zeroed unknown is caught by the diagonal check before PARDISO runs
    CASES += [("pardiso", how) for how in ("zero", "drop", "negative")]


@pytest.mark.parametrize("solver, how", CASES)
def test_singular_local_matrix_names_its_subdomain(solver, how):
    n = 18
    A = laplacian_2d(n)
    d = decomposition_from_grid((n, n), (3, 3))
    N = d.num_subdomains
    for i in (0, N // 2, N - 1):
        j = only_in(d, i)
        Ab = broken(A, j, how)
        # the independent answer: the subdomains whose dense local matrix is not SPD
        bad = [k for k, s in enumerate(d.subdomains)
               if np.linalg.eigvalsh(Ab.toarray()[np.ix_(s, s)])[0] <= 1e-12]
        assert bad == [i]
        with pytest.raises(ValueError) as exc:
            TwoLevelSchwarz(Ab, d, coarse=False, local_solver=solver)
        if how != "negative":  # an empty row: the matrix contract names the row first
            assert str(exc.value).startswith(f"A: row {j} is empty"), str(exc.value)
            continue
        match = re.search(r"subdomain (\d+),", str(exc.value))
        assert match, str(exc.value)
        assert int(match.group(1)) == i, (solver, how, i, str(exc.value))
        # named R_i A R_i^T, never A_i: A_0 is the coarse matrix
        assert f"R_{i} A R_{i}^T of subdomain {i}" in str(exc.value)
        assert f"A_{i}" not in str(exc.value)
