"""GenEO's ``eigen_stop``: the subspace iteration stops when the Ritz values below the
threshold have settled (``"settled"``, the default) or as soon as they are as many as the
inertia of ``N_i - tau D_i A_i D_i`` counts (``"count"``, PARDISO only).  The references are
the settled run and dense ``scipy.linalg.eigh`` of the pencils."""

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse.linalg as spla

import ddops
from ddops.dd import geneo
from ddops.dd.adaptive import geneo_basis
from ddops.dd.coarse import coarse_basis
from tests._optional import need
from tests.dd.test_adaptive import channels
from tests.dd.test_geneo_inertia import dense_pencils
from tests.dd.test_oversampling import condition, elasticity

N = 31


def cg_iterations(A, M):
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    its = [0]
    _, info = spla.cg(A, b, M=M, rtol=1e-8, callback=lambda x: its.__setitem__(0, its[0] + 1))
    assert info == 0
    return its[0]


@pytest.mark.parametrize("case", ["poisson", "channels"])
def test_count_stop_selects_the_inertia_counts_in_fewer_solves(case):
    """The same number of functions per subdomain as the dense pencils have eigenvalues
    below the threshold, in fewer solves than settling (measured 3 against 7 on Poisson, 5
    against 7 on the channels of contrast 100), for at most a few more CG iterations."""
    need("pardiso")
    A = ddops.poisson_2d(N) if case == "poisson" else channels(N, 1e2)
    d = ddops.Decomposition.from_grid((N, N), (4, 4), overlap=1)
    runs = {stop: geneo_basis(A, d, eigen_stop=stop, return_info=True)
            for stop in ("settled", "count")}
    settled, count = runs["settled"][1], runs["count"][1]
    below = settled.threshold * (1 - geneo.THRESHOLD_TIE_RTOL)
    exact = np.array([int((sla.eigh(Ni, Bi, eigvals_only=True) < below).sum())
                      for Ni, Bi in dense_pencils(A, d)])
    np.testing.assert_array_equal(count.selected, exact)
    np.testing.assert_array_equal(settled.selected, exact)
    assert count.stats["subspace_iterations"] < settled.stats["subspace_iterations"]
    its = {stop: cg_iterations(A, ddops.TwoLevelSchwarz(A, d, coarse_basis=Phi))
           for stop, (Phi, _) in runs.items()}
    assert its["count"] <= 1.15 * its["settled"] + 1, its


def test_count_stop_without_the_inertia_is_the_settled_iteration(monkeypatch):
    """Without the inertia's counts (no PARDISO) there is nothing to count: the same basis
    to the last bit."""
    monkeypatch.setattr(geneo, "GENEO_INERTIA", False)
    A = channels(23, 1e6)
    d = ddops.Decomposition.from_grid((23, 23), (3, 3), overlap=1)
    P = {stop: geneo_basis(A, d, eigen_stop=stop).toarray() for stop in ("settled", "count")}
    np.testing.assert_array_equal(P["settled"], P["count"])


def test_count_stop_settles_the_small_ritz_values():
    """Where the contrast puts eigenvalues far below the threshold, their Ritz vectors still
    settle with ``"count"`` (:data:`~ddops.dd.geneo.GENEO_COUNT_SETTLE`): the condition number
    of the settled iteration (measured 8.1; with the count alone 19.9 at contrast 1e8)."""
    need("pardiso")
    A, d, Z = elasticity(12, 1e8, count=10, radius=0.15)
    kappa = {stop: condition(A, ddops.TwoLevelSchwarz(A, d, options=ddops.SchwarzOptions(
        coarse="geneo", null_space=Z, geneo=ddops.GenEOOptions(eigen_stop=stop))))
        for stop in ("settled", "count")}
    assert kappa["count"] <= 1.05 * kappa["settled"], kappa


def test_count_stop_without_the_small_settle_loses_the_contrast(monkeypatch):
    """The same problem with that settle switched off: the condition number grows (so the
    test above checks the rule, not a problem on which the count alone is enough)."""
    need("pardiso")
    A, d, Z = elasticity(12, 1e8, count=10, radius=0.15)
    options = ddops.SchwarzOptions(coarse="geneo", null_space=Z,
                                   geneo=ddops.GenEOOptions(eigen_stop="count"))
    kept = condition(A, ddops.TwoLevelSchwarz(A, d, options=options))
    monkeypatch.setattr(geneo, "GENEO_COUNT_SETTLE", 0.0)
    assert condition(A, ddops.TwoLevelSchwarz(A, d, options=options)) > 1.5 * kept


def test_the_option_reaches_the_preconditioner():
    """``GenEOOptions(eigen_stop=...)`` builds the basis of ``geneo_basis(..., eigen_stop=...)``
    (the two stops give different bases here, so a lost option shows)."""
    need("pardiso")
    A = ddops.poisson_2d(N)
    d = ddops.Decomposition.from_grid((N, N), (4, 4), overlap=1)
    for stop in ("settled", "count"):
        M = ddops.TwoLevelSchwarz(A, d, options=ddops.SchwarzOptions(
            coarse="geneo", geneo=ddops.GenEOOptions(eigen_stop=stop)))
        ref = geneo_basis(A, d, eigen_stop=stop)
        np.testing.assert_array_equal(M.coarse._Phi.toarray(), ref.toarray())
    assert not np.array_equal(geneo_basis(A, d, eigen_stop="count").toarray(),
                              geneo_basis(A, d).toarray())


@pytest.mark.parametrize("value,error,message", [
    ("fast", ValueError, "eigen_stop must be one of"),
    (1, TypeError, "eigen_stop must be one of .* got int 1"),
    (True, TypeError, "eigen_stop must be one of .* got bool True"),
])
def test_bad_eigen_stop_is_named(value, error, message):
    A = channels(23, 1e6)
    d = ddops.Decomposition.from_grid((23, 23), (3, 3), overlap=1)
    with pytest.raises(error, match=message):
        geneo_basis(A, d, eigen_stop=value)
    with pytest.raises(error, match=message):
        ddops.GenEOOptions(eigen_stop=value)
    with pytest.raises(ValueError, match="eigen_stop"):  # not an option of another space
        coarse_basis(d, "gdsw", A=A, eigen_stop="count")
