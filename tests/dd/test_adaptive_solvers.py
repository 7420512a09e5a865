"""The sparse solvers inside the adaptive coarse spaces, against the SuperLU reference path.

GenEO's shift-and-invert solves and AGDSW's interior solves (its Schur complements
``A_{Gamma I} A_II^{-1} A_{I Gamma}``, by PARDISO's partial solves) run on PARDISO when it
is installed.  Both must give the basis of the SuperLU path to rounding: the columns are
compared one by one after fixing each column's sign, so a changed selection, order or
eigenvector fails.  GenEO factorises ``N + tau B`` once per chunk of subdomains, however
often its subspace grows.
"""

import numpy as np
import pytest

import ddops
from ddops.dd import agdsw, geneo
from ddops.dd.adaptive import agdsw_basis, geneo_basis
from ddops.linalg.local_solvers import default_exact_solver
from ddops.problems import diffusion_2d, high_contrast_channels
from tests._optional import need

N = 31


def channels(contrast=1e6, period=3):
    return diffusion_2d(high_contrast_channels(N, contrast, margin=2, period=period))


def signed(Phi):
    """Dense columns, each with its largest entry positive."""
    P = Phi.toarray()
    j = np.argmax(np.abs(P), axis=0)
    return P * np.sign(P[j, np.arange(P.shape[1])])


def assert_same_basis(P, Q):
    assert P.shape == Q.shape
    np.testing.assert_allclose(signed(P), signed(Q), rtol=0, atol=1e-10)


@pytest.mark.parametrize("partition", ["grid", "metis"])
def test_geneo_pardiso_equals_superlu(partition, monkeypatch):
    need("pardiso")
    A = channels()
    d = (ddops.Decomposition.from_grid((N, N), (4, 4), overlap=1) if partition == "grid"
         else ddops.Decomposition.from_matrix(A, 12, overlap=1))
    # the same stopping rule on both (the inertia's count, which needs PARDISO, stops the
    # iteration elsewhere: tests/dd/test_geneo_inertia.py)
    monkeypatch.setattr(geneo, "GENEO_INERTIA", False)
    bases = {}
    for solver in ("superlu", "pardiso"):
        monkeypatch.setattr(geneo, "default_exact_solver", lambda s=solver: s)
        bases[solver], info = geneo_basis(A, d, return_info=True)
        assert info.stats["eigen_functions"] > 0
    assert_same_basis(bases["superlu"], bases["pardiso"])


def test_geneo_factorises_once_per_chunk_while_the_subspace_grows(monkeypatch):
    """With a small first subspace every subdomain with channels fills it, so the subspace
    grows: the factorisation of ``N + tau B`` is made once per chunk all the same, and the
    basis is the one of a first subspace that needs no growth."""
    A = channels(period=2)
    d = ddops.Decomposition.from_grid((N, N), (3, 3), overlap=1)
    # (the subspace grows where the counts below the threshold are not known beforehand)
    monkeypatch.setattr(geneo, "GENEO_INERTIA", False)
    reference = geneo_basis(A, d)
    factors, iterations = [], []
    shifted, subspace = geneo._shifted_factor, geneo._subspace_eigh
    monkeypatch.setattr(geneo, "GENEO_INITIAL_VECTORS", 1)
    monkeypatch.setattr(geneo, "_shifted_factor",
                        lambda *a: factors.append(1) or shifted(*a))
    monkeypatch.setattr(geneo, "_subspace_eigh",
                        lambda f, *a: iterations.append(id(f)) or subspace(f, *a))
    grown = geneo_basis(A, d)
    assert len(iterations) > len(factors) >= 1  # the subspace grew ...
    assert len(set(iterations)) == len(factors)  # ... on the factorisation of its chunk
    assert grown.shape[1] == reference.shape[1]
    # the same span: the Ritz vectors of another subspace converge to the same eigenvectors,
    # to the accuracy of the iteration (its Ritz values settle to 1e-6 of the threshold,
    # the vectors to about the square root of that; measured 1.6e-5)
    Q, _ = np.linalg.qr(reference.toarray())
    G = grown.toarray()
    G /= np.linalg.norm(G, axis=0)
    assert np.linalg.norm(G - Q @ (Q.T @ G), axis=0).max() <= 1e-4


@pytest.mark.parametrize("partition", ["grid", "metis"])
def test_agdsw_pardiso_partial_solves_equal_superlu(partition):
    need("pardiso")
    A = channels()
    owner = (ddops.Decomposition.from_grid((N, N), (4, 4)).owner if partition == "grid"
             else ddops.Decomposition.from_matrix(A, 12).owner)
    P, info = agdsw_basis(A, owner, extension_solver="pardiso", return_info=True)
    S = agdsw_basis(A, owner, extension_solver="superlu")
    assert info.stats["eigen_functions"] > 0
    assert_same_basis(S, P)


def test_agdsw_schur_solver_follows_the_extension_solver(monkeypatch):
    """The Schur complements are computed with the extension's exact solver, and with the
    default exact one under the inexact ``"amg"`` extension: SuperLU factorises the
    interiors (and solves), PARDISO computes them by its partial factorisation (on
    interfaces of at least ``SCHUR_PARDISO_MIN_WIDTH`` unknowns, here all of them)."""
    need("pardiso")
    need("amg")
    A = channels()
    owner = ddops.Decomposition.from_grid((N, N), (3, 3)).owner
    monkeypatch.setattr(agdsw, "SCHUR_PARDISO_MIN_WIDTH", 0)
    used = []
    factorize, schur = agdsw.factorize_blocks, agdsw.pardiso_schur_complement
    monkeypatch.setattr(agdsw, "factorize_blocks",
                        lambda K, o, solver, **kw: used.append(solver) or factorize(K, o, solver,
                                                                                    **kw))
    monkeypatch.setattr(agdsw, "pardiso_schur_complement",
                        lambda K, rows: used.append("pardiso schur") or schur(K, rows))
    for extension_solver in ("superlu", "pardiso", "amg", "auto"):
        used.clear()
        agdsw_basis(A, owner, extension_solver=extension_solver)
        expected = "superlu" if extension_solver == "superlu" else "pardiso schur"
        assert used and set(used) == {expected}


def test_geneo_solves_with_the_default_exact_solver(monkeypatch):
    """GenEO's shifted matrices go to the default exact solver (PARDISO when installed, else
    SuperLU), once per chunk."""
    A = channels()
    d = ddops.Decomposition.from_grid((N, N), (3, 3), overlap=1)
    used = []
    factorize = geneo.factorize_blocks
    monkeypatch.setattr(geneo, "factorize_blocks",
                        lambda K, o, solver, **kw: used.append(solver) or factorize(K, o, solver,
                                                                                    **kw))
    geneo_basis(A, d)
    assert used and set(used) == {default_exact_solver()}
