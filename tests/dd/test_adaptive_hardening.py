"""Hardening of the adaptive coarse spaces and of the GDSW entry: the subspace iteration's
limit, GenEO's SPD test of its shifted matrices, AGDSW's Schur complements against a dense
construction at high contrast and their memory check, and the message for a matrix that is
not positive definite."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

import ddops
from ddops import _validation as validation
from ddops.dd import agdsw, geneo
from ddops.dd.adaptive import agdsw_basis, geneo_basis, local_neumann_matrices
from ddops.dd.gdsw import gdsw_basis, interface_components
from ddops.problems import diffusion_2d, high_contrast_channels


def channels(n, contrast, period=4, margin=2):
    return diffusion_2d(high_contrast_channels(n, contrast, margin=margin, period=period))


def dense_schur(M, keep):
    """Dense Schur complement of M onto keep (eliminating the rest), no shift."""
    rest = np.setdiff1d(np.arange(M.shape[0]), keep)
    return (M[np.ix_(keep, keep)]
            - M[np.ix_(keep, rest)] @ np.linalg.solve(M[np.ix_(rest, rest)],
                                                      M[np.ix_(rest, keep)]))


def cut_neumann(A, idx):
    """A on idx with the absolute couplings that leave idx taken off the diagonal (dense)."""
    Ad = A.toarray()
    out = np.ones(A.shape[0], dtype=bool)
    out[idx] = False
    return Ad[np.ix_(idx, idx)] - np.diag(np.abs(Ad[np.ix_(idx, np.flatnonzero(out))]).sum(1))


# -- 1: the subspace iteration's limit -----------------------------------------------------------
def test_geneo_warns_once_when_the_subspace_iteration_hits_its_limit(monkeypatch):
    n = 23
    A = channels(n, 1e6)
    d = ddops.Decomposition.from_grid((n, n), (3, 3), overlap=1)
    geneo_basis(A, d)  # converges within the limit: no warning (RuntimeWarnings are errors)
    monkeypatch.setattr(geneo, "GENEO_MAX_ITERATIONS", 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        geneo_basis(A, d)
    limit = [w for w in caught if "stopped at its limit of 2 solves" in str(w.message)]
    assert len(limit) == 1 and issubclass(limit[0].category, RuntimeWarning)
    assert "times the threshold" in str(limit[0].message)


# -- 2: GenEO's SPD test reads SuperLU's row permutation -----------------------------------------
def test_geneo_refuses_an_indefinite_shifted_matrix_whose_pivots_look_positive():
    """N_0 + tau D_0 A_0 D_0 = J, pairs of swapped rows (eigenvalues +-1, zero diagonal):
    SuperLU pivots off the diagonal and its U has a positive diagonal; the shifted matrix is
    refused at its factorisation, by its pivots, not later by an eigenvalue."""
    n, tau = 12, 0.25
    A = ddops.poisson_2d(n)
    d = ddops.Decomposition.from_grid((n, n), (2, 2), overlap=1)
    Ns = local_neumann_matrices(A, d)
    idx = d.subdomains[0]
    w = 1.0 / d.multiplicity[idx]
    A0 = A[idx][:, idx].tocoo()
    B = sp.csr_matrix(((w[A0.row] * A0.data) * w[A0.col], (A0.row, A0.col)), shape=A0.shape)
    m = idx.size
    pairs = np.arange(0, m - 1, 2)
    J = sp.coo_matrix((np.ones(2 * pairs.size), (np.r_[pairs, pairs + 1], np.r_[pairs + 1, pairs])),
                      shape=(m, m)).tolil()
    if m % 2:
        J[m - 1, m - 1] = 1.0
    Ns[0] = (J.tocsr() - tau * B).tocsr()
    assert np.linalg.eigvalsh(Ns[0].toarray() + tau * B.toarray()).min() < -0.5
    with pytest.raises(ValueError, match="subdomain 0 is not positive semidefinite.*pivot"):
        geneo_basis(A, d, neumann=Ns, threshold=tau)


# -- 3: AGDSW's Schur complements and their memory -----------------------------------------------
def _agdsw_pencils(A, owner, monkeypatch):
    """The (S^N_e, S^D_e) pencil of every component as AGDSW builds it."""
    comps = interface_components(A, owner)
    store = []
    real = agdsw.generalized_eigh

    def spy(SN, SD):
        store.append((SN.copy(), SD.copy()))
        return real(SN, SD)

    monkeypatch.setattr(agdsw, "generalized_eigh", spy)
    # one thread: the size groups run in order, so the recorded pencils pair with them
    with threadpool_limits(limits=1):
        groups, _, sizes = agdsw._agdsw_eigenpairs(A, owner, comps, 2**26,
                                                   np.zeros((comps.interface.size, 0)))
    got = {}
    for (members, _), (SN, SD) in zip(groups.values(), store, strict=True):
        for j, c in enumerate(members):
            s = sizes[c]
            got[int(c)] = SN[j, :s, :s], SD[j, :s, :s]
    return comps, got


def test_agdsw_neumann_schur_complements_match_dense_at_contrast_1e6(monkeypatch):
    n = 23
    A = channels(n, 1e6)
    d = ddops.Decomposition.from_grid((n, n), (3, 3))
    comps, got = _agdsw_pencils(A, d.owner, monkeypatch)
    x, comp = comps.interface, comps.component
    interface = np.zeros(A.shape[0], dtype=bool)
    interface[x] = True
    part_sets = comps.part_sets()
    worst = 0.0
    for c in range(comps.num_components):
        e = x[comp == c]
        SN = 0.0
        for p in part_sets[c]:
            gamma_p = x[[p in part_sets[cc] for cc in comp]]
            closure = np.union1d(np.flatnonzero(~interface & (d.owner == p)), gamma_p)
            SN = SN + dense_schur(cut_neumann(A, closure), np.searchsorted(closure, e))
        worst = max(worst, np.linalg.norm(got[c][0] - SN) / np.linalg.norm(SN))
    # rounding times the contrast is about 1e-10; the inverse of the block of an inverse of
    # the shifted matrix was 6e-3 off here
    assert worst < 1e-7


def test_agdsw_schur_blocks_are_refused_before_they_are_allocated(monkeypatch):
    n = 23
    A = channels(n, 1e4)
    d = ddops.Decomposition.from_grid((n, n), (3, 3))
    # the dense blocks of the chunk of all 9 parts (Gamma_p of up to 60 unknowns: 0.8 MB)
    monkeypatch.setattr(validation, "memory_limit_bytes", lambda: 1000)
    with pytest.raises(ValueError, match=r"the AGDSW Schur complements of 9 parts of up to "
                                         r"\d+ interface unknowns would need .* more than the "
                                         r"1000 B this machine has; more, smaller parts"):
        agdsw_basis(A, d.owner)
    # the batch of parts whose (part, component) blocks are eliminated together: it needs
    # less than the chunk's dense blocks, so it is checked on its own (two parts of 40)
    S = np.broadcast_to(4.0 * np.eye(40), (2, 40, 40)).copy()
    slots = np.tile(np.arange(20), (4, 1)) + np.array([[0], [20], [0], [20]])
    monkeypatch.setattr(validation, "memory_limit_bytes", lambda: 1000)
    with pytest.raises(ValueError, match=r"the AGDSW Schur complements of 4 \(part, "
                                         r"component\) blocks of up to 40 interface unknowns"):
        agdsw._schur_onto_blocks(S, np.ones((2, 40), dtype=bool), np.ones(2),
                                 np.array([0, 0, 1, 1]), slots, np.ones((4, 20), dtype=bool),
                                 2**26)


# -- 5: a matrix that is not positive definite ---------------------------------------------------
@pytest.mark.parametrize("build", [
    lambda A, d: gdsw_basis(A, d.owner),
    lambda A, d: agdsw_basis(A, d.owner),
    lambda A, d: geneo_basis(A, d),
    lambda A, d: ddops.TwoLevelSchwarz(A, d, "gdsw"),
    lambda A, d: ddops.TwoLevelSchwarz(A, d, "geneo"),
])
def test_minus_a_is_named_not_positive_definite(build):
    n = 12
    A = ddops.poisson_2d(n)
    d = ddops.Decomposition.from_grid((n, n), (2, 2), overlap=1)
    with pytest.raises(ValueError) as exc:
        build(-A, d)
    text = str(exc.value)
    assert "not positive definite" in text and "singular" not in text
    assert f"A[0, 0] = {-A[0, 0]:.3e}" in text


def test_an_indefinite_a_with_a_positive_diagonal_is_named_not_positive_definite():
    n = 12
    A = ddops.poisson_2d(n)
    A = (A - 0.5 * A[0, 0] * sp.identity(n * n, format="csr")).tocsr()  # half the diagonal
    assert A.diagonal().min() > 0 and np.linalg.eigvalsh(A.toarray()).min() < 0
    d = ddops.Decomposition.from_grid((n, n), (2, 2))
    with pytest.raises(ValueError, match="A is not positive definite: the interior matrix "
                                         "A_II of part"):
        gdsw_basis(A, d.owner, solver="superlu")
