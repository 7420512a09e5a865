"""The library's warnings point at the caller's line, whatever the depth they are raised at.

A fixed ``stacklevel`` pointed into ddops (``TwoLevelSchwarz`` reporting its own
``__init__``) or into scipy (the inconsistent right-hand side under ``cg``); the warnings now
go to the first frame outside ddops, numpy and scipy.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ddops

from .dd.test_kernel import neumann_laplacian_2d


def _caught(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return caught


@pytest.fixture(scope="module")
def elasticity():
    pytest.importorskip("skfem")
    from ddops.problems import fem_elasticity_2d

    A, X = fem_elasticity_2d(12)
    d = ddops.Decomposition.from_matrix(A, 8, 1, block_size=2)
    Z = ddops.rigid_body_modes(X)
    return A, d, Z, np.vstack([Z[0::2], Z[1::2]])  # the last: field-major, misordered


def test_null_space_warnings_point_at_the_caller(elasticity):
    A, d, _, field_major = elasticity
    calls = {
        "TwoLevelSchwarz, field-major": lambda: ddops.TwoLevelSchwarz(A, d, "gdsw",
                                                                       null_space=field_major),
        "coarse_basis, field-major": lambda: ddops.coarse_basis(d, "gdsw", A=A,
                                                               null_space=field_major),
        "TwoLevelSchwarz, no null space": lambda: ddops.TwoLevelSchwarz(A, d, "gdsw"),
    }
    for label, call in calls.items():
        caught = _caught(call)
        assert caught, label
        assert {w.filename for w in caught} == {__file__}, (label, [w.filename for w in caught])


def test_inconsistent_right_hand_side_warning_points_at_the_caller():
    A = neumann_laplacian_2d(16)
    n = A.shape[0]
    d = ddops.Decomposition.from_matrix(A, 4, 1)
    b = np.random.default_rng(1).standard_normal(n) + 0.5  # mean 0.5: inconsistent
    for label, call in {
        "under scipy's cg": lambda M: spla.cg(A, b, rtol=1e-8, M=M, maxiter=5),
        "M.matvec": lambda M: M.matvec(b),
    }.items():
        M = ddops.TwoLevelSchwarz(A, d, "gdsw", kernel=np.ones(n))
        caught = [w for w in _caught(lambda call=call, M=M: call(M))
                  if "inconsistent" in str(w.message)]
        assert len(caught) == 1, label
        assert caught[0].filename == __file__, (label, caught[0].filename)


def test_partition_warning_points_at_the_caller():
    A = ddops.poisson_2d(12).tolil()
    A[0, 30] = -0.1  # one one-sided coupling: the pattern is not symmetric
    A = sp.csr_matrix(A)
    caught = [w for w in _caught(lambda: ddops.Decomposition.from_matrix(A, 4, 1))
              if "not symmetric" in str(w.message)]
    assert caught and caught[0].filename == __file__
