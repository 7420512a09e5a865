"""Solvers of the GDSW harmonic extension (ddops.dd.gdsw.harmonic_extension, solver=...).

The reference is dense numpy: Phi_I = -A_II^{-1} A_IG Phi_G with the interface of the
algebraic rule (unknowns coupled to another part) computed here from the matrix graph.
The inexact "amg" extension is checked through its residuals, computed here from A, the
interface values and the result.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

import ddops
from ddops.dd import extension
from ddops.dd.gdsw import EXTENSION_RTOL, gdsw_basis, harmonic_extension
from tests._optional import need


def algebraic_interface(A, owner):
    """Unknowns with a stored off-diagonal coupling to an unknown of another part."""
    C = sp.coo_matrix(A)
    return np.unique(C.row[owner[C.row] != owner[C.col]])


class Problem:
    """2D Poisson, a METIS partition, its interface and the dense blocks A_II, A_IG."""

    def __init__(self, m, parts):
        self.A = ddops.poisson_2d(m).tocsr()
        self.n = self.A.shape[0]
        self.owner = ddops.Decomposition.from_matrix(self.A, parts).owner
        self.interface = algebraic_interface(self.A, self.owner)
        self.interior = np.setdiff1d(np.arange(self.n), self.interface)
        A_I = self.A[self.interior]
        self.A_II = A_I[:, self.interior].toarray()
        self.A_IG = A_I[:, self.interface].toarray()

    def random_values(self, k, seed=0):
        """n x k interface values: dense random on the interface, zero in the interiors
        (every function touches every part)."""
        G = np.zeros((self.n, k))
        G[self.interface] = np.random.default_rng(seed).standard_normal((self.interface.size,
                                                                         k))
        return G

    def component_values(self, seed=0):
        """One function per interface component with random values on it (local functions,
        as in GDSW: each touches the parts next to its component)."""
        _, info = gdsw_basis(self.A, self.owner, return_info=True, solver="superlu")
        comp = info.components.component
        G = np.zeros((self.n, int(comp.max()) + 1))
        G[self.interface, comp] = np.random.default_rng(seed).uniform(0.5, 2.0, comp.size)
        return G

    def rhs(self, G):
        return -self.A_IG @ G[self.interface]

    def dense_extension(self, G):
        Phi = G.copy()
        with threadpool_limits(1, user_api="blas"):
            Phi[self.interior] = np.linalg.solve(self.A_II, self.rhs(G))
        return Phi

    def relative_residuals(self, G, Phi):
        """||A_II x_j - b_j|| / ||b_j|| of every column j with b_j != 0."""
        b = self.rhs(G)
        r = np.linalg.norm(self.A_II @ Phi[self.interior] - b, axis=0)
        nb = np.linalg.norm(b, axis=0)
        return r[nb > 0] / nb[nb > 0]


@pytest.fixture(scope="module")
def small():
    """16 x 16 grid, 4 parts (the amg hierarchy of A_II is one level: exact)."""
    return Problem(16, 4)


@pytest.fixture(scope="module")
def medium():
    """32 x 32 grid, 4 parts: A_II has about 900 rows, the amg hierarchy two levels."""
    return Problem(32, 4)


def test_interface_is_the_algebraic_rule(small):
    """The interface computed here is the one gdsw_basis reports."""
    _, info = gdsw_basis(small.A, small.owner, return_info=True, solver="superlu")
    np.testing.assert_array_equal(info.components.interface, small.interface)


# -- exact solvers ------------------------------------------------------------------------------
@pytest.mark.parametrize("values", ["random", "components"])
@pytest.mark.parametrize("solver,chunk_rows", [("superlu", None), ("superlu", 30),
                                               ("pardiso", None), ("pardiso", 30),
                                               ("auto", None)])
def test_exact_extension_equals_dense(small, solver, chunk_rows, values):
    """-A_II^{-1} A_IG Phi_G in the interiors, Phi_G kept on the interface (1e-12 rel.)."""
    need(solver)
    G = small.random_values(5) if values == "random" else small.component_values()
    Phi = harmonic_extension(small.A, small.owner, small.interface, sp.csr_matrix(G),
                             solver=solver, chunk_rows=chunk_rows)
    assert sp.issparse(Phi) and Phi.shape == G.shape
    ref = small.dense_extension(G)
    assert np.abs(Phi.toarray() - ref).max() <= 1e-12 * np.abs(ref).max()


def test_exact_extension_on_a_larger_problem(medium):
    """The same on the two-level-amg problem used below (the reference for it)."""
    G = medium.random_values(4)
    Phi = harmonic_extension(medium.A, medium.owner, medium.interface, sp.csr_matrix(G),
                             solver="superlu").toarray()
    ref = medium.dense_extension(G)
    assert np.abs(Phi - ref).max() <= 1e-12 * np.abs(ref).max()


def test_bad_solver_and_rtol_are_refused(small):
    G = sp.csr_matrix(small.random_values(2))
    with pytest.raises(ValueError, match="solver"):
        harmonic_extension(small.A, small.owner, small.interface, G, solver="mumps")
    with pytest.raises(ValueError, match="rtol"):
        harmonic_extension(small.A, small.owner, small.interface, G, solver="amg", rtol=0.0)


# -- the inexact amg extension ------------------------------------------------------------------
@pytest.mark.parametrize("rtol", [1e-3, 1e-8])
def test_amg_extension_meets_its_residual_bound(medium, rtol):
    """Every column: ||A_II x - b|| <= rtol ||b|| (residual computed here), interface values
    unchanged, and the error within what the residual allows,
    ||x - x*|| <= ||A_II^{-1}|| ||r|| <= rtol ||b|| / lambda_min(A_II) (loose: 10x)."""
    need("amg")
    G = medium.random_values(5, seed=1)
    Phi = harmonic_extension(medium.A, medium.owner, medium.interface, sp.csr_matrix(G),
                             solver="amg", rtol=rtol).toarray()
    res = medium.relative_residuals(G, Phi)
    assert res.size == G.shape[1]
    assert (res <= rtol).all(), res
    np.testing.assert_array_equal(Phi[medium.interface], G[medium.interface])
    ref = medium.dense_extension(G)
    with threadpool_limits(1, user_api="blas"):
        lam_min = np.linalg.eigvalsh(medium.A_II)[0]
    err = np.linalg.norm(Phi - ref, axis=0)
    bound = rtol * np.linalg.norm(medium.rhs(G), axis=0) / lam_min
    assert (err <= 10 * bound).all()
    assert err.max() > 0  # inexact: not the exact extension to rounding


def test_amg_extension_bound_per_coarse_function(medium):
    """Local functions (one per interface component, values of two magnitudes): every
    coarse function's residual is at most rtol times its right-hand side."""
    need("amg")
    _, info = gdsw_basis(medium.A, medium.owner, return_info=True, solver="superlu")
    comp = info.components.component
    scale = 10.0 ** (-2.0 * (np.arange(comp.max() + 1) % 2))
    G = np.zeros((medium.n, scale.size))
    G[medium.interface, comp] = scale[comp]
    rtol = 1e-8
    Phi = harmonic_extension(medium.A, medium.owner, medium.interface, sp.csr_matrix(G),
                             solver="amg", rtol=rtol).toarray()
    res = medium.relative_residuals(G, Phi)
    assert (res <= rtol).all(), res.max() / rtol


def test_default_rtol_is_pinned_and_applied(medium):
    """EXTENSION_RTOL = 1e-6 is the default of the amg extension: the default call meets
    1e-6 on every column, while rtol=1e-1 leaves a column above 1e-6 (the tolerance is
    really used)."""
    need("amg")
    assert EXTENSION_RTOL == 1e-6
    assert extension.EXTENSION_RTOL == 1e-6
    G = medium.random_values(5, seed=2)
    Gs = sp.csr_matrix(G)
    default = harmonic_extension(medium.A, medium.owner, medium.interface, Gs,
                                 solver="amg").toarray()
    assert (medium.relative_residuals(G, default) <= 1e-6).all()
    loose = harmonic_extension(medium.A, medium.owner, medium.interface, Gs, solver="amg",
                               rtol=1e-1).toarray()
    assert (medium.relative_residuals(G, loose) > 1e-6).any()


def test_gdsw_basis_passes_extension_rtol(medium):
    """gdsw_basis(solver="amg") extends to extension_rtol (default EXTENSION_RTOL): the
    residuals of its columns, computed here, follow the tolerance."""
    need("amg")
    A, owner = medium.A, medium.owner
    exact = gdsw_basis(A, owner, solver="superlu").toarray()

    def residuals(Phi):
        return medium.relative_residuals(Phi, Phi)  # b from Phi's own interface values

    tight = gdsw_basis(A, owner, solver="amg", extension_rtol=1e-10).toarray()
    loose = gdsw_basis(A, owner, solver="amg", extension_rtol=1e-1).toarray()
    default = gdsw_basis(A, owner, solver="amg").toarray()
    assert np.abs(tight - exact).max() <= 1e-7 * np.abs(exact).max()
    assert residuals(loose).max() > 1e-6
    assert residuals(default).max() <= EXTENSION_RTOL
    assert np.abs(default - exact).max() <= 1e-4 * np.abs(exact).max()


# -- gdsw_basis and coarse_basis ---------------------------------------------------------------
@pytest.mark.parametrize("variant", ["gdsw", "rgdsw"])
def test_gdsw_basis_superlu_and_pardiso_agree(small, variant):
    need("pardiso")
    a = gdsw_basis(small.A, small.owner, variant=variant, solver="superlu")
    b = gdsw_basis(small.A, small.owner, variant=variant, solver="pardiso")
    assert a.shape == b.shape and a.shape[1] > 0
    assert abs(a - b).max() <= 1e-10 * abs(a).max()


@pytest.mark.parametrize("variant", ["gdsw", "rgdsw"])
def test_gdsw_basis_equals_dense_extension_of_its_interface_values(small, variant):
    """Each exact-solver basis column is the dense extension of its own interface values."""
    Phi = gdsw_basis(small.A, small.owner, variant=variant, solver="superlu").toarray()
    ref = small.dense_extension(np.where(np.isin(np.arange(small.n), small.interface)[:, None],
                                         Phi, 0.0))
    assert np.abs(Phi - ref).max() <= 1e-12 * np.abs(ref).max()


def test_coarse_basis_rgdsw_superlu_equals_default(medium):
    """coarse_basis(..., extension_solver="superlu") is the default RGDSW to 1e-10."""
    d = ddops.Decomposition.from_matrix(medium.A, 4)
    ref = ddops.coarse_basis(d, "rgdsw", A=medium.A)
    Phi = ddops.coarse_basis(d, "rgdsw", A=medium.A, extension_solver="superlu")
    assert Phi.shape == ref.shape and ref.shape[1] > 0
    assert abs(Phi - ref).max() <= 1e-10 * abs(ref).max()


@pytest.mark.parametrize("kind", ["gdsw", "rgdsw", "agdsw"])
def test_coarse_basis_forwards_extension_solver(medium, kind):
    """extension_solver="amg" reaches the extension: the basis moves off the exact one by
    more than rounding and less than the extension tolerance allows."""
    need("amg")
    d = ddops.Decomposition.from_matrix(medium.A, 4)
    ref = ddops.coarse_basis(d, kind, A=medium.A, extension_solver="superlu")
    Phi = ddops.coarse_basis(d, kind, A=medium.A, extension_solver="amg")
    diff = abs(Phi - ref).max() / abs(ref).max()
    assert 1e-12 < diff < 1e-4


@pytest.mark.parametrize("kind", ["nicolaides", "pou", "geneo"])
def test_coarse_basis_refuses_extension_solver_where_unused(small, kind):
    d = ddops.Decomposition.from_matrix(small.A, 4)
    A = small.A if kind == "geneo" else None
    with pytest.raises(ValueError, match="extension_solver"):
        ddops.coarse_basis(d, kind, A=A, extension_solver="superlu")


def test_schwarz_coarse_options_extension_solver(small):
    """TwoLevelSchwarz(coarse_options={"extension_solver": ...}) builds the same coarse
    space as coarse_basis with that solver."""
    d = ddops.Decomposition.from_matrix(small.A, 4)
    M = ddops.TwoLevelSchwarz(small.A, d, coarse_basis="gdsw",
                              coarse_options={"extension_solver": "superlu"})
    ref = ddops.coarse_basis(d, "gdsw", A=small.A, extension_solver="superlu")
    assert abs(M.coarse_matrix - ref).max() <= 1e-14 * abs(ref).max()


def test_iteration_limit_is_pinned_and_stops_with_a_message(medium, monkeypatch):
    """EXTENSION_MAXITER = 200 bounds the inexact extension's CG: with the limit set to one
    iteration and a tolerance one V-cycle cannot reach, the extension stops with a
    ValueError naming the tolerance instead of returning an unconverged basis."""
    need("amg")
    assert extension.EXTENSION_MAXITER == 200
    G = sp.csr_matrix(medium.random_values(3, seed=5))
    monkeypatch.setattr(extension, "EXTENSION_MAXITER", 1)
    with pytest.raises(ValueError, match=r"rtol=1e-12 in 1 preconditioned CG"):
        harmonic_extension(medium.A, medium.owner, medium.interface, G, solver="amg",
                           rtol=1e-12)
