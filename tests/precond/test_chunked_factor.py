"""Chunked sparse factorisations: the local solver of TwoLevelSchwarz and the harmonic
extension of GDSW factorise block-diagonal matrices chunk by chunk of consecutive blocks.
Forced small chunks must give the solves of one factorisation of the whole matrix."""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ddops
from ddops.dd import extension, gdsw
from ddops.dd.gdsw import chunk_bounds, gdsw_basis, harmonic_extension
from ddops.precond import corrections
from ddops.precond.schwarz import TwoLevelSchwarz
from ddops.problems import poisson_2d

SINGLE = 10**9  # a chunk size that puts everything into one factorisation


def rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.mark.parametrize("chunk_rows", [1, 3, 7, 100])
def test_chunk_bounds_cover_the_blocks(chunk_rows):
    sizes = np.array([3, 0, 5, 1, 0, 0, 4, 2, 6])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    bounds = chunk_bounds(offsets, chunk_rows)
    assert bounds[0] == 0 and bounds[-1] == offsets[-1]
    assert np.all(np.diff(bounds) > 0)
    assert np.isin(bounds, offsets).all()  # chunks end where blocks end
    # the rule: block i joins chunk offsets[i] // chunk_rows (an independent loop)
    expected, last = [], None
    for start, size in zip(offsets[:-1], sizes):
        if size and start // chunk_rows != last:
            expected.append(start)
            last = start // chunk_rows
    np.testing.assert_array_equal(bounds, expected + [offsets[-1]])
    assert np.array_equal(chunk_bounds(np.zeros(4, int), chunk_rows), [0, 0])


def _problem(m=24, parts=4):
    A = poisson_2d(m)
    return A, ddops.Decomposition.from_grid((m, m), (parts, parts), 1)


@pytest.mark.parametrize("variant", ["additive", "restricted", "hybrid"])
def test_chunked_local_solver_matches_one_factorisation(monkeypatch, variant):
    A, d = _problem()
    X = np.random.default_rng(0).standard_normal((A.shape[0], 3))
    monkeypatch.setattr(corrections, "LOCAL_CHUNK_ROWS", SINGLE)
    one = TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant=variant, local_solver="sparse")
    monkeypatch.setattr(corrections, "LOCAL_CHUNK_ROWS", 60)  # a few subdomains per chunk
    chunked = TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant=variant,
                              local_solver="sparse")
    assert len(one._local_lu) == 1 and len(chunked._local_lu) > 3
    dense = TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant=variant, local_solver="dense")
    for adjoint in (False, True):
        ref = one.rmatmat(X) if adjoint else one.matmat(X)
        got = chunked.rmatmat(X) if adjoint else chunked.matmat(X)
        assert rel(got, ref) < 1e-12
        dense_y = dense.rmatmat(X) if adjoint else dense.matmat(X)
        assert rel(got, dense_y) < 1e-10
    assert chunked.factor_nnz > 0


def test_local_solver_against_explicit_inverses(monkeypatch):
    # independent of SuperLU: sum_i R_i^T A_i^{-1} R_i from dense inverses of each block
    A, d = _problem(16, 4)
    monkeypatch.setattr(corrections, "LOCAL_CHUNK_ROWS", 25)
    M = TwoLevelSchwarz(A, d, coarse=False, local_solver="sparse")
    assert len(M._local_lu) > 3
    Ad = A.toarray()
    ref = np.zeros_like(Ad)
    for idx in d.subdomains:
        ref[np.ix_(idx, idx)] += np.linalg.inv(Ad[np.ix_(idx, idx)])
    assert rel(M.to_dense(), ref) < 1e-12


@pytest.mark.parametrize("variant", ["gdsw", "rgdsw"])
def test_chunked_harmonic_extension_matches_one_factorisation(monkeypatch, variant):
    A, d = _problem(30, 5)
    monkeypatch.setattr(extension, "FACTOR_CHUNK_ROWS", SINGLE)
    one = gdsw_basis(A, d.owner, variant=variant)
    monkeypatch.setattr(extension, "FACTOR_CHUNK_ROWS", 1)  # one part per chunk
    chunked = gdsw_basis(A, d.owner, variant=variant)
    assert one.nnz == chunked.nnz
    assert rel(chunked.toarray(), one.toarray()) < 1e-12
    # and against the dense harmonic extension -A_II^{-1} A_IG Phi_G
    Ad = A.toarray()
    comps = gdsw.interface_components(A, d.owner)
    G = comps.interface
    mask = np.ones(A.shape[0], bool)
    mask[G] = False
    interior = np.flatnonzero(mask)
    Phi = chunked.toarray()
    ext = -np.linalg.solve(Ad[np.ix_(interior, interior)], Ad[np.ix_(interior, G)] @ Phi[G])
    assert rel(Phi[interior], ext) < 1e-12


def test_harmonic_extension_refuses_coupled_interiors():
    A, d = _problem(12, 2)
    owner = d.owner
    # an "interface" that leaves the interiors of parts 0 and 1 coupled
    G = np.flatnonzero((owner == 2) | (owner == 3))[:5]
    PhiG = sp.csr_matrix((np.ones(G.size), (G, np.arange(G.size))), shape=(A.shape[0], G.size))
    with pytest.raises(ValueError, match="couples the interiors of different parts"):
        harmonic_extension(A.tocsr(), owner, G, PhiG, chunk_rows=1)


def shifted_laplacian(n, rows, diagonal):
    """1D Laplacian tridiag(-1, 2, -1) with the diagonal set to ``diagonal`` on ``rows``."""
    d = np.full(n, 2.0)
    d[rows] = diagonal
    return sp.diags([-np.ones(n - 1), d, -np.ones(n - 1)], [-1, 0, 1], format="csr")


@pytest.mark.parametrize("exact", [True, False])
def test_spd_checks_name_the_bad_subdomain(monkeypatch, exact):
    monkeypatch.setattr(corrections, "EXACT_PIVOT_CHECK_ROWS", 10**9 if exact else 0)
    monkeypatch.setattr(corrections, "LOCAL_CHUNK_ROWS", 120)
    n = 800
    d = ddops.Decomposition1D(n, 8, overlap=2, kind="dof")
    last = d.subdomains[-1]
    cases = [
        # a sign error in the last subdomain: a non-positive diagonal entry
        (shifted_laplacian(n, last[-9:-5], -2.0), 7),
        # strongly indefinite in subdomain 7 only (diagonal still positive)
        (shifted_laplacian(n, last[10:], 0.2), 7),
    ]
    for A, i in cases:
        with pytest.raises(ValueError, match=f"subdomain {i}, .*not positive definite"):
            TwoLevelSchwarz(A, d, coarse=False, local_solver="sparse")
    # one subdomain of a pure-Neumann Laplacian: singular up to rounding
    # (one level on a singular A without kernel= warns first, then the subdomain is named)
    A = shifted_laplacian(100, [0, 99], 1.0)
    with pytest.warns(RuntimeWarning, match="A is singular"), \
            pytest.raises(ValueError, match="subdomain 0, .*singular"):
        TwoLevelSchwarz(A, ddops.Decomposition1D(100, 1, kind="dof"), coarse=False,
                        local_solver="sparse")


def test_exact_check_catches_a_weakly_indefinite_block(monkeypatch):
    # one negative eigenvalue as small as the smallest positive ones: the exact pivot check
    # (used up to EXACT_PIVOT_CHECK_ROWS rows) flags it, the one-solve test above it need not
    n = 400
    d = ddops.Decomposition1D(n, 8, overlap=2, kind="dof")
    A = shifted_laplacian(n, np.arange(200, 260), 1.99)
    blocks = [np.linalg.eigvalsh(A[np.ix_(s, s)].toarray()).min() for s in d.subdomains]
    assert min(blocks) < 0
    with pytest.raises(ValueError, match="not positive definite"):
        TwoLevelSchwarz(A, d, coarse=False, local_solver="sparse")


@pytest.mark.parametrize("seed", range(4))
def test_one_solve_check_accepts_spd_blocks(monkeypatch, seed):
    # no false alarms on SPD matrices, ill-conditioned ones included
    monkeypatch.setattr(corrections, "EXACT_PIVOT_CHECK_ROWS", 0)
    rng = np.random.default_rng(seed)
    m = 30
    k = 10.0 ** rng.uniform(-4, 4, m * m)
    A = sp.diags(k) @ poisson_2d(m) @ sp.diags(k)  # symmetric scaling: condition up to ~1e19
    A = ((A + A.T) * 0.5).tocsr()
    d = ddops.Decomposition.from_grid((m, m), (3, 3), 1)
    M = TwoLevelSchwarz(A, d, coarse=False, local_solver="sparse")
    x = rng.standard_normal(m * m)
    # the local sum agrees with the dense inverses of the blocks
    ref = np.zeros(m * m)
    for idx in d.subdomains:
        ref[idx] += spla.spsolve(A[idx][:, idx].tocsc(), x[idx])
    assert rel(M.matvec(x), ref) < 1e-8
