"""AGDSW's Schur complements of the parts' Neumann Schur complements onto their interface
components (the tree of eliminations of ``ddops.dd.agdsw._schur_onto_blocks``): every block
against a dense elimination in long double, the assembled ``S_e^N`` against the dense
construction from ``A``, at contrast 1e6 (channels, a floating inclusion) and on
homogeneous problems, and the whole basis against the one built with one elimination of
the rest of the part's interface per component."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

import ddops
from ddops.dd import agdsw
from ddops.dd.agdsw import agdsw_basis
from ddops.dd.gdsw import interface_components
from ddops.problems import diffusion_2d, high_contrast_channels


def channels(n, contrast):
    return diffusion_2d(high_contrast_channels(n, contrast, margin=2, period=4))


def inclusion(n, contrast):
    """A square of coefficient ``contrast`` over the middle box of a 3 x 3 grid of boxes and
    its interface: the middle part floats, and its stiff interface is nearly rigid."""
    c = np.ones((n + 1, n + 1))
    c[n // 3 - 1:2 * n // 3 + 3, n // 3 - 1:2 * n // 3 + 3] = contrast
    return diffusion_2d(c)


def grid_owner(n, boxes):
    return ddops.Decomposition.from_grid((n, n), (boxes, boxes)).owner


PROBLEMS = {
    "poisson 2D": lambda: (ddops.poisson_2d(24), grid_owner(24, 3)),
    "poisson 3D": lambda: (ddops.problems.poisson_3d(9),
                           ddops.Decomposition.from_matrix(ddops.problems.poisson_3d(9), 8).owner),
    "channels 1e6": lambda: (channels(23, 1e6), grid_owner(23, 3)),
    "inclusion 1e6": lambda: (inclusion(23, 1e6), grid_owner(23, 3)),
}
HIGH_CONTRAST = ("channels 1e6", "inclusion 1e6")


def long_double_schur(M, keep):
    """Schur complement of ``M`` onto ``keep`` by Gaussian elimination in long double."""
    M = np.array(M, dtype=np.longdouble)
    rest = np.setdiff1d(np.arange(M.shape[0]), keep)
    order = np.r_[rest, keep]
    M = M[np.ix_(order, order)]
    for k in range(rest.size):
        M[k + 1:, k + 1:] -= np.outer(M[k + 1:, k], M[k, k + 1:]) / M[k, k]
    return M[rest.size:, rest.size:]


def cut_neumann(Ad, idx):
    """The algebraic Neumann matrix of ``idx`` (couplings that leave it cut), dense."""
    out = np.ones(Ad.shape[0], dtype=bool)
    out[idx] = False
    return Ad[np.ix_(idx, idx)] - np.diag(np.abs(Ad[np.ix_(idx, np.flatnonzero(out))]).sum(1))


def per_component_schur(S, real, scale, bp, sl, valid, chunk_bytes):
    """The reference: one solve with the rest ``S_rr`` of the part's interface per block,
    in the output format of ``_schur_onto_blocks`` (the blocks' matrices one after the
    other)."""
    SB = []
    for b in range(bp.size):  # a reference, not a hot path
        w, k = int(real[bp[b]].sum()), int(valid[b].sum())
        M = S[bp[b], :w, :w]
        e = sl[b, :k]
        r = np.setdiff1d(np.arange(w), e)
        Mrr = M[np.ix_(r, r)]
        try:
            X = np.linalg.solve(Mrr, M[np.ix_(r, e)])
        except np.linalg.LinAlgError:
            X = np.linalg.solve(Mrr + agdsw.NEUMANN_SHIFT * scale[bp[b]] * np.eye(r.size),
                                M[np.ix_(r, e)])
        SB.append((M[np.ix_(e, e)] - M[np.ix_(e, r)] @ X).ravel())
    return np.concatenate(SB), np.concatenate([[0], np.cumsum([v.size for v in SB])])


def _spy_blocks(A, owner, monkeypatch, solver="superlu"):
    """Run AGDSW's eigenpairs, recording the input and output of every call to
    ``_schur_onto_blocks`` (the dense tree, the path of SuperLU) and the ``S_e^N`` and
    ``S_e^D`` of every component."""
    comps = interface_components(A, owner)
    calls, pencils = [], []
    blocks, eigh = agdsw._schur_onto_blocks, agdsw.generalized_eigh

    def spy_blocks(*args):
        out = blocks(*args)
        calls.append((args, out))
        return out

    def spy_eigh(SN, SD):
        pencils.append((SN.copy(), SD.copy()))
        return eigh(SN, SD)

    monkeypatch.setattr(agdsw, "_schur_onto_blocks", spy_blocks)
    monkeypatch.setattr(agdsw, "generalized_eigh", spy_eigh)
    # one thread: the chunks run in order, so the recorded calls pair with the groups
    with threadpool_limits(limits=1):
        groups, _, sizes = agdsw._agdsw_eigenpairs(A, owner, comps, 2**26,
                                                   np.zeros((comps.interface.size, 0)),
                                                   solver=solver)
    SN, SD = {}, {}
    for (members, _), (stack, dirichlet) in zip(groups.values(), pencils, strict=True):
        for j, c in enumerate(members):
            SN[int(c)] = stack[j, :sizes[c], :sizes[c]]
            SD[int(c)] = dirichlet[j, :sizes[c], :sizes[c]]
    return comps, calls, (SN, SD)


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_every_block_is_the_schur_complement_of_its_part(name, monkeypatch):
    """Each (part, component) block against the long-double elimination of the rest of the
    part's interface, relative to the part's matrix (the blocks of a floating part onto a
    single node are zero up to the rounding of ``S`` itself)."""
    A, owner = PROBLEMS[name]()
    _, calls, _ = _spy_blocks(A, owner, monkeypatch)
    assert calls
    worst = 0.0
    count = 0
    for (S, real, _, bp, sl, valid, _), (values, off) in calls:
        # one unpadded k x k matrix per block, one after the other
        assert off[0] == 0 and off[-1] == values.size
        for b in range(bp.size):
            w, k = int(real[bp[b]].sum()), int(valid[b].sum())
            assert off[b + 1] - off[b] == k * k
            exact = long_double_schur(S[bp[b], :w, :w], sl[b, :k])
            SB = values[off[b]:off[b + 1]].reshape(k, k)
            err = np.linalg.norm((SB - exact).astype(np.float64))
            worst = max(worst, err / np.linalg.norm(S[bp[b], :w, :w]))
            count += 1
    assert count >= 8
    assert worst < 1e-14, worst


@pytest.mark.parametrize("solver", ["superlu", "pardiso"])
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_assembled_schur_complements_match_long_double(name, solver, monkeypatch):
    """``S_e^N = sum_p S_{p,e}^N`` against the same sum built densely from ``A`` (the cut
    Neumann matrix of every closed part, eliminated onto ``e`` in long double), and
    ``S_e^D = A_ee - sum_p A_eI_p A_I_p^-1 A_I_p e`` likewise (the interiors of the parts
    around ``e`` eliminated): the reference path (SuperLU's interior solves and the dense
    tree) and PARDISO's partial factorisations of the closed parts."""
    if solver == "pardiso" and not ddops.linalg.local_solvers.pardiso_available():
        pytest.skip("PARDISO is not installed")
    A, owner = PROBLEMS[name]()
    monkeypatch.setattr(agdsw, "SCHUR_PARDISO_MIN_WIDTH", 0)  # on every interface
    comps, _, (got, got_d) = _spy_blocks(A, owner, monkeypatch, solver)
    Ad = A.toarray()
    x, comp = comps.interface, comps.component
    interface = np.zeros(A.shape[0], dtype=bool)
    interface[x] = True
    part_sets = comps.part_sets()
    worst = worst_d = 0.0
    for c in range(comps.num_components):
        e = x[comp == c]
        SN = 0.0
        for p in part_sets[c]:
            gamma_p = x[[p in part_sets[cc] for cc in comp]]
            closure = np.union1d(np.flatnonzero(~interface & (owner == p)), gamma_p)
            SN = SN + long_double_schur(cut_neumann(Ad, closure), np.searchsorted(closure, e))
        SN = SN.astype(np.float64)
        worst = max(worst, np.linalg.norm(got[c] - SN) / np.linalg.norm(SN))
        interiors = np.flatnonzero(~interface & np.isin(owner, list(part_sets[c])))
        around = np.union1d(interiors, e)
        SD = long_double_schur(Ad[np.ix_(around, around)],
                               np.searchsorted(around, e)).astype(np.float64)
        worst_d = max(worst_d, np.linalg.norm(got_d[c] - SD) / np.linalg.norm(SD))
    # measured: 5e-10 at contrast 1e6 (the elimination of the interior in double precision
    # dominates), 4e-15 on the homogeneous problems; the inverse of the block of an inverse
    # of the shifted matrix was 6e-3 off on the channels
    assert worst < (1e-8 if name in HIGH_CONTRAST else 1e-12), worst
    assert worst_d < 1e-12, worst_d


def _basis(A, owner, monkeypatch, reference, solver="superlu"):
    with monkeypatch.context() as patch:
        if reference:
            patch.setattr(agdsw, "_schur_onto_blocks", per_component_schur)
        # PARDISO's partial factorisations on every interface, however narrow
        patch.setattr(agdsw, "SCHUR_PARDISO_MIN_WIDTH", 0)
        return agdsw_basis(A, owner, return_info=True, extension_solver=solver)


@pytest.mark.parametrize("solver", ["superlu", "pardiso"])
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_basis_equals_the_per_component_elimination(name, solver, monkeypatch):
    """The same coarse dimension, the same functions per component and the same span as
    with one elimination of ``S_rr`` per (part, component) block (SuperLU's dense
    reference path), from the dense tree and from PARDISO's partial factorisations."""
    if solver == "pardiso" and not ddops.linalg.local_solvers.pardiso_available():
        pytest.skip("PARDISO is not installed")
    A, owner = PROBLEMS[name]()
    Phi, info = _basis(A, owner, monkeypatch, reference=False, solver=solver)
    Ref, ref_info = _basis(A, owner, monkeypatch, reference=True)
    assert Phi.shape == Ref.shape
    np.testing.assert_array_equal(info.kept, ref_info.kept)
    np.testing.assert_array_equal(info.column_group, ref_info.column_group)
    np.testing.assert_allclose(info.eigenvalues, ref_info.eigenvalues, rtol=1e-8, atol=1e-12)
    P, R = Phi.toarray(), Ref.toarray()
    Q = sla.orth(P)
    assert Q.shape[1] == P.shape[1]
    assert np.linalg.norm(R - Q @ (Q.T @ R)) <= 1e-8 * np.linalg.norm(R)
    Qr = sla.orth(R)
    assert np.linalg.norm(P - Qr @ (Qr.T @ P)) <= 1e-8 * np.linalg.norm(P)
    if name in HIGH_CONTRAST:  # the adaptive functions are there
        assert info.kept.sum() > 0


def test_blocks_equal_the_reference_with_small_batches():
    """Memory-bounded batches of parts and groups of widths give the same blocks."""
    rng = np.random.default_rng(0)
    widths = np.array([31, 12, 40, 25])
    width = int(widths.max())
    S = np.broadcast_to(np.eye(width), (widths.size, width, width)).copy()
    real = np.arange(width)[None, :] < widths[:, None]
    rows, parts = [], []
    for p, w in enumerate(widths):
        G = rng.standard_normal((w, w + 2))
        S[p, :w, :w] = G @ G.T
        cuts = np.sort(rng.choice(np.arange(1, w), size=rng.integers(1, 7), replace=False))
        for block in np.split(rng.permutation(w), cuts):
            rows.append(block)
            parts.append(p)
    bp = np.array(parts)
    bw = max(r.size for r in rows)
    sl = np.zeros((bp.size, bw), dtype=np.int64)
    valid = np.zeros((bp.size, bw), dtype=bool)
    for b, r in enumerate(rows):
        sl[b, :r.size] = r
        valid[b, :r.size] = True
    scale = np.abs(np.einsum("pii->pi", S)).max(axis=1)
    ref, ref_off = per_component_schur(S, real, scale, bp, sl, valid, 2**26)
    for chunk in (2**26, 1):  # all at once; one part per batch
        got, off = agdsw._schur_onto_blocks(S, real, scale, bp, sl, valid, chunk)
        np.testing.assert_array_equal(off, ref_off)
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-10 * np.abs(ref).max())


def test_an_exactly_singular_eliminated_block_is_shifted():
    """A kernel vector that vanishes on a block (a zero row and column here) makes a block
    on the way exactly singular: the rounding-size shift gives finite blocks, the
    reference's."""
    S = np.zeros((1, 6, 6))
    S[0, :4, :4] = np.array([[4.0, -1, 0, -1], [-1, 4, -1, 0], [0, -1, 4, -1], [-1, 0, -1, 4]])
    S[0, 4, 4] = 0.0  # slot 4: no coupling at all
    S[0, 5, 5] = 1.0  # padding
    real = np.arange(6)[None, :] < 5
    bp = np.zeros(4, dtype=np.int64)
    sl = np.array([[0, 1], [2, 0], [3, 0], [4, 0]])
    valid = np.array([[True, True], [True, False], [True, False], [True, False]])
    scale = np.array([4.0])
    got, _ = agdsw._schur_onto_blocks(S, real, scale, bp, sl, valid, 2**26)
    ref, _ = per_component_schur(S, real, scale, bp, sl, valid, 2**26)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_pardiso_path_falls_back_to_the_dense_tree(monkeypatch):
    """An eliminated block that PARDISO finds not positive definite sends the chunk to the
    reference path: the same basis as SuperLU's."""
    if not ddops.linalg.local_solvers.pardiso_available():
        pytest.skip("PARDISO is not installed")
    from ddops.linalg.local_solvers import SingularBlockError

    A, owner = PROBLEMS["channels 1e6"]()
    calls = []

    def refuse(K, rows):
        calls.append(rows.size)
        raise SingularBlockError(0)

    monkeypatch.setattr(agdsw, "pardiso_schur_complement", refuse)
    monkeypatch.setattr(agdsw, "SCHUR_PARDISO_MIN_WIDTH", 0)
    Phi, info = agdsw_basis(A, owner, return_info=True, extension_solver="pardiso")
    monkeypatch.undo()
    Ref, ref_info = agdsw_basis(A, owner, return_info=True, extension_solver="superlu")
    assert calls
    np.testing.assert_array_equal(info.kept, ref_info.kept)
    np.testing.assert_allclose(Phi.toarray(), Ref.toarray(), atol=1e-10 * abs(Ref).max())


def test_pardiso_path_with_finite_element_neumann_matrices():
    """3D P1 elasticity with stiff balls and the finite-element Neumann matrices of the
    subdomains: PARDISO's partial factorisations give the reference path's eigenvalues and
    coarse space."""
    if not ddops.linalg.local_solvers.pardiso_available():
        pytest.skip("PARDISO is not installed")
    fem = pytest.importorskip("ddops.problems.fem")
    pytest.importorskip("skfem")
    def E(centroids):
        return np.where(np.linalg.norm(centroids - 0.5, axis=1) < 0.25, 1e6, 1.0)

    A, X = fem.fem_elasticity_3d(5, E=E)
    d = ddops.Decomposition.from_matrix(A, 8, 1, block_size=3)
    _, _, neumann = fem.fem_elasticity_3d(5, E=E, neumann=d)
    Z = ddops.rigid_body_modes(X)
    out = {}
    for solver, width in (("superlu", 0), ("pardiso", 0), ("pardiso", 10**9)):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(agdsw, "SCHUR_PARDISO_MIN_WIDTH", width)
            out[solver, width] = agdsw_basis(A, d.owner, null_space=Z, block_size=3,
                                             neumann=neumann, neumann_indices=d.subdomains,
                                             return_info=True, extension_solver=solver)
    (P, info), (R, ref) = out["pardiso", 0], out["superlu", 0]
    R = R.toarray()

    def signed(Q):
        """Q's columns with the reference's signs (an eigenvector's sign is rounding's)."""
        Q = Q.toarray()
        return Q * np.where((Q * R).sum(axis=0) < 0, -1.0, 1.0)

    # above the width limit PARDISO factorises the interiors and solves (the dense tree)
    np.testing.assert_allclose(signed(out["pardiso", 10**9][0]), R, atol=1e-8 * abs(R).max())
    np.testing.assert_array_equal(info.kept, ref.kept)
    assert info.kept.sum() > 0
    np.testing.assert_allclose(info.eigenvalues, ref.eigenvalues, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(signed(P), R, atol=1e-8 * abs(R).max())


@pytest.mark.parametrize("width", [0, 10**9])
def test_a_part_without_interface_beside_the_others(width, monkeypatch):
    """A part that ``A`` couples to no other (a disconnected block of its own) has no
    interface and no block: both paths (PARDISO's partial factorisations from every width,
    and the interior solves with the dense tree) skip it and give the basis of the other
    parts, as the per-component reference."""
    A = sp.block_diag([ddops.poisson_2d(12), ddops.poisson_2d(6)], format="csr")
    owner = np.concatenate([grid_owner(12, 2), np.full(36, 4)])
    monkeypatch.setattr(agdsw, "SCHUR_PARDISO_MIN_WIDTH", width)
    solver = "pardiso" if ddops.linalg.local_solvers.pardiso_available() else "superlu"
    Phi = agdsw_basis(A, owner, extension_solver=solver)
    monkeypatch.setattr(agdsw, "_schur_onto_blocks", per_component_schur)
    Ref = agdsw_basis(A, owner, extension_solver="superlu")
    assert Phi.shape == Ref.shape == (180, 8)
    np.testing.assert_allclose(Phi.toarray(), Ref.toarray(), atol=1e-10)


@pytest.mark.parametrize("name", HIGH_CONTRAST)
@pytest.mark.parametrize("skip", [0, None])
def test_the_basis_is_the_same_with_memory_bounded_batches(name, skip):
    """``chunk_bytes=1`` (one column per interior solve, one component per eigensolve,
    one part per elimination batch) gives the basis of the default batches."""
    A, owner = PROBLEMS[name]()
    ref, ref_info = agdsw_basis(A, owner, skip_contrast=skip, return_info=True)
    got, info = agdsw_basis(A, owner, skip_contrast=skip, return_info=True, chunk_bytes=1)
    assert got.shape == ref.shape and ref_info.stats["eigen_functions"] > 0
    np.testing.assert_array_equal(info.column_group, ref_info.column_group)
    np.testing.assert_allclose(info.eigenvalues, ref_info.eigenvalues, rtol=1e-8)
    G, R = got.toarray(), ref.toarray()
    sign = np.sign(np.sum(G * R, axis=0))  # (eigenvectors: up to sign)
    np.testing.assert_allclose(G * sign, R, rtol=0, atol=1e-8 * np.abs(R).max())


@pytest.mark.parametrize("tau", [0.05, 0.3])
def test_the_kept_eigenvectors_are_the_leading_selectable_ones(tau):
    """``keep=(threshold, cap)`` returns the leading columns of every batch's eigenvectors,
    through the last one that the selection keeps."""
    A, owner = PROBLEMS["channels 1e6"]()
    comps = interface_components(A, owner)
    Zx = np.zeros((comps.interface.size, 0))
    lam_all, full, _ = agdsw._agdsw_eigenpairs(A, owner, comps, 2**26, Zx)
    _, kept, _ = agdsw._agdsw_eigenpairs(A, owner, comps, 2**26, Zx, keep=(tau, 4))
    widths = []
    for batch, (_, lam) in lam_all.items():
        below = lam < tau
        rank = np.cumsum(below, axis=1)
        last = max((int(j) + 1 for j in np.flatnonzero((below & (rank <= 4)).any(axis=0))),
                   default=0)
        np.testing.assert_array_equal(kept[batch], full[batch][:, :, :last])
        widths.append(last)
    assert max(widths) > 0


@pytest.mark.parametrize("contiguous", [True, False])
def test_stacked_gather_is_numpys_three_index_gather(contiguous):
    """``_stacked_gather`` (one flat ``take``) gives the entries of numpy's gather by three
    broadcast index arrays, for any stack members in any order, repeated rows and columns,
    rectangular blocks, and a stack that is not contiguous (numpy's own path then)."""
    rng = np.random.default_rng(3)
    M = rng.standard_normal((5, 9, 7))
    if not contiguous:
        M = np.swapaxes(rng.standard_normal((5, 7, 9)), 1, 2)
    assert M.flags.c_contiguous == contiguous
    which = np.array([4, 0, 0, 2])
    rows = rng.integers(0, 9, (4, 6))
    cols = rng.integers(0, 7, (4, 3))
    expected = M[which[:, None, None], rows[:, :, None], cols[:, None, :]]
    out = agdsw._stacked_gather(M, which, rows, cols)
    assert out.shape == (4, 6, 3) and np.array_equal(out, expected)
    # every entry by a loop, independent of numpy's broadcasting
    for k in range(4):
        for i in range(6):
            for j in range(3):
                assert out[k, i, j] == M[which[k], rows[k, i], cols[k, j]]
