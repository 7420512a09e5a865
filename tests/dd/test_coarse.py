import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

from ddops import Decomposition, Decomposition1D, coarse_basis
from ddops.dd.coarse import column_rank, hat_functions, subdomain_blocks, validate_coarse_matrix
from ddops.testing import any_decompositions, coarse_matrices, decompositions

from ..reference import hat, reference_subdomains


@given(decompositions().filter(lambda d: d.num_subdomains > 1))
def test_interface_hats_pointwise(d):
    Phi = coarse_basis(d)
    assert sp.isspmatrix_csr(Phi) and Phi.shape == (d.num_dofs, d.num_subdomains - 1)
    assert Phi.nnz == np.count_nonzero(Phi.toarray()) and Phi.has_sorted_indices  # no stored 0
    x = d.coordinates
    peaks = np.concatenate([[0.0], x[d.interface_nodes], [1.0]])
    dense = Phi.toarray()
    for k in range(1, len(peaks) - 1):
        expected = [hat(xi, peaks[k - 1], peaks[k], peaks[k + 1]) for xi in x]
        np.testing.assert_allclose(dense[:, k - 1], expected, atol=1e-14)
        assert dense[d.interface_nodes[k - 1], k - 1] == 1.0
    assert column_rank(Phi) == d.num_subdomains - 1


def test_interface_hats_paper_element():
    d = Decomposition1D(256, 8)
    Phi = coarse_basis(d).toarray()
    # hat 1 peaks at node 64 (unknown 63), vanishes at nodes 32 and 96
    assert Phi[63, 1] == 1.0 and Phi[31, 1] == 0.0 and Phi[95, 1] == 0.0
    assert Phi[47, 1] == 0.5
    # first hat reaches 0 at the Dirichlet node 0: value 1/32 at node 1
    assert Phi[0, 0] == pytest.approx(1 / 32)
    # interior hats sum to one between the first and the last interface
    np.testing.assert_allclose(Phi[31:224].sum(axis=1), 1.0)


@given(any_decompositions())
def test_pou_basis(d):
    Phi = coarse_basis(d, "pou")
    assert Phi.shape == (d.num_dofs, d.num_subdomains)
    np.testing.assert_allclose(Phi.sum(axis=1).A1, 1.0)
    for i, s in enumerate(d.subdomains):
        col = Phi[:, [i]].toarray().ravel()
        np.testing.assert_allclose(col[s], d.weights(i))
        assert np.count_nonzero(col) == len(s)


@given(any_decompositions(), st.integers(1, 9))
def test_grid_hats(d, size):
    Phi = coarse_basis(d, "grid_hats", size=size).toarray()
    peaks = np.concatenate([[0.0], np.arange(1, size + 1) / (size + 1), [1.0]])
    for k in range(1, size + 1):
        expected = [hat(xi, peaks[k - 1], peaks[k], peaks[k + 1]) for xi in d.coordinates]
        np.testing.assert_allclose(Phi[:, k - 1], expected, atol=1e-14)


def test_column_rank_fallback():
    Phi = sp.csr_matrix(np.array([[1.0, 1.0], [1.0, 1.0], [2.0, 2.0]]))
    assert column_rank(Phi) == 1
    assert column_rank(sp.csr_matrix(np.array([[1.0, 1.0], [1.0, 2.0]]))) == 2


def test_column_rank_ignores_explicit_zeros():
    """A stored zero must not pass for the private row that proves a column independent."""
    # rows 0-1: two equal columns (rank 1); rows 2-3: a stored zero in each column alone
    Phi = sp.csr_matrix((np.array([1.0, 1.0, 1.0, 1.0, 0.0, 0.0]),
                         (np.array([0, 0, 1, 1, 2, 3]), np.array([0, 1, 0, 1, 1, 0]))),
                        shape=(4, 2))
    assert Phi.nnz == 6
    assert column_rank(Phi) == 1 == np.linalg.matrix_rank(Phi.toarray())
    assert Phi.nnz == 6  # the caller's matrix keeps its stored zeros
    from ddops import SchwarzOperator

    d = Decomposition([[0, 1], [2, 3]], 4)
    op = SchwarzOperator(d, local_rank=1, coarse_basis=Phi)
    assert op.rank_bound == 2 + 1


@given(st.integers(1, 30).flatmap(lambda n: coarse_matrices(n)))
def test_column_rank_matches_numpy(Phi):
    dense = Phi.toarray() if sp.issparse(Phi) else Phi
    assert column_rank(sp.csr_matrix(Phi)) == np.linalg.matrix_rank(dense)


@given(st.integers(1, 30).flatmap(lambda n: coarse_matrices(n)))
def test_validate_coarse_matrix_keeps_the_values_and_the_input(Phi):
    before = Phi.copy()
    got = validate_coarse_matrix(Phi, Phi.shape[0])
    assert sp.isspmatrix_csr(got) and got.dtype == np.float64 and got.has_sorted_indices
    dense = Phi.toarray() if sp.issparse(Phi) else Phi
    np.testing.assert_array_equal(got.toarray(), dense)
    if sp.issparse(Phi):
        assert Phi.format == before.format and (Phi != before).nnz == 0
    else:
        np.testing.assert_array_equal(Phi, before)


def test_bad_arguments():
    d = Decomposition1D(32, 4)
    with pytest.raises(ValueError, match="kind must be one of"):
        coarse_basis(d, "wavelets")
    with pytest.raises(ValueError, match="size is only used with kind='grid_hats'"):
        coarse_basis(d, "pou", size=3)
    with pytest.raises(ValueError, match="size must be >= 1"):
        coarse_basis(d, "grid_hats", size=0)
    with pytest.raises(ValueError, match="'interface_hats' needs interface nodes"):
        coarse_basis(Decomposition1D(32, 1), "interface_hats")
    with pytest.raises(ValueError, match="'interface_hats' needs interface nodes"):
        coarse_basis(Decomposition([[0, 1], [1, 2]], 3), "interface_hats")
    with pytest.raises(ValueError, match="'grid_hats' needs size >= 1"):
        coarse_basis(Decomposition1D(32, 1), "grid_hats")
    with pytest.raises(ValueError, match="peaks must be strictly increasing"):
        hat_functions(np.linspace(0, 1, 5), [0.5, 0.4])


def _block_cases():
    general = Decomposition([[0, 1, 2, 3], [2, 3, 4], [1, 4, 5]], 6)
    cases = [(general, sp.random(6, 4, density=0.5, random_state=3, format="csr"))]
    for d in (Decomposition1D(64, 4, 3), Decomposition1D(45, 5, 1, kind="dof")):
        cases += [(d, coarse_basis(d, name)) for name in ("interface_hats", "pou", "grid_hats")]
        cases.append((d, sp.random(d.num_dofs, 7, density=0.3, random_state=4, format="csr")))
    return cases


@given(any_decompositions(max_n=40).flatmap(
    lambda d: st.tuples(st.just(d), coarse_matrices(d.num_dofs))))
def test_subdomain_blocks_reassemble_any_phi(case):
    """Random decompositions and user bases (zero rows, repeated columns, all zero)."""
    d, Phi = case
    test_subdomain_blocks_reassemble_phi(d, sp.csr_matrix(Phi))


@pytest.mark.parametrize("d,Phi", _block_cases())
def test_subdomain_blocks_reassemble_phi(d, Phi):
    """The owned pieces of Phi add up to Phi, and ``collect`` sums the coarse pieces."""
    rng = np.random.default_rng(1)
    blocks, index, collect = subdomain_blocks(d, Phi, extra_columns=2)
    N, p, c = blocks.shape
    rebuilt = np.zeros(Phi.shape)
    for i, rows in enumerate(reference_subdomains(d)):
        np.add.at(rebuilt, (rows[:, None], index[i][None, :]), blocks[i, :rows.size])
        assert not blocks[i, rows.size:].any()  # padding rows
    np.testing.assert_array_equal(rebuilt, Phi.toarray())
    # collect @ Z sums the coarse rows of a stacked (N, 2 + c, B) array: Phi^T F
    F = rng.standard_normal((d.num_dofs, 3))
    Z = np.zeros((N, 2 + c, 3))
    for i, rows in enumerate(d.subdomains):
        Z[i, 2:] = blocks[i, :rows.size].T @ F[rows]
        Z[i, :2] = rng.standard_normal((2, 3))  # local rows: ignored
    np.testing.assert_allclose(collect @ Z.reshape(-1, 3), Phi.T @ F, rtol=1e-13, atol=1e-13)


def test_user_coarse_matrix_is_not_modified_and_may_be_read_only():
    """Building an operator canonicalises a copy of Phi, never the caller's arrays."""
    from ddops import SchwarzOperator

    d = Decomposition1D(16, 2, 1)
    dense = coarse_basis(d, "pou").toarray()
    # duplicates, an explicit zero and unsorted indices: canonicalisation has work to do
    rows, cols = np.nonzero(dense)
    rows = np.concatenate([rows, rows[:2], [0]])
    cols = np.concatenate([cols, cols[:2], [1]])
    vals = np.concatenate([dense[np.nonzero(dense)], [0.0, 0.0], [0.0]])
    user = sp.csr_matrix((vals, (rows, cols)), shape=dense.shape)
    user.has_canonical_format = False
    before = [a.copy() for a in (user.data, user.indices, user.indptr)]
    op = SchwarzOperator(d, coarse_basis=user)
    for a, b in zip(before, (user.data, user.indices, user.indptr)):
        np.testing.assert_array_equal(a, b)
    assert op.rank_bound > 0
    np.testing.assert_allclose(op.coarse_matrix.toarray(), dense)
    frozen = coarse_basis(d, "pou").copy()
    for a in (frozen.data, frozen.indices, frozen.indptr):
        a.setflags(write=False)
    ref = SchwarzOperator(d, coarse_basis=coarse_basis(d, "pou"), seed=3)
    op = SchwarzOperator(d, coarse_basis=frozen, seed=3)
    np.testing.assert_array_equal(op.to_dense(), ref.to_dense())


def test_duplicate_entries_of_a_user_csr_are_summed():
    """A CSR built from raw arrays may repeat a column in a row: the entries add up."""
    from ddops import SchwarzOperator

    d = Decomposition1D(12, 3, 1)
    canonical = coarse_basis(d, "pou")
    rows = np.repeat(np.arange(canonical.shape[0]), np.diff(canonical.indptr))
    # every stored entry split into two halves stored side by side
    data = np.repeat(canonical.data / 2, 2)
    indices = np.repeat(canonical.indices, 2)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(np.repeat(rows, 2),
                                                        minlength=canonical.shape[0]))])
    raw = sp.csr_matrix((data, indices, indptr), shape=canonical.shape)
    assert not raw.has_canonical_format and raw.nnz == 2 * canonical.nnz
    blocks, index, collect = subdomain_blocks(d, raw)
    rebuilt = np.zeros(canonical.shape)
    for i, rows_i in enumerate(reference_subdomains(d)):
        np.add.at(rebuilt, (rows_i[:, None], index[i][None, :]), blocks[i, :rows_i.size])
    np.testing.assert_allclose(rebuilt, canonical.toarray(), rtol=1e-15)
    op = SchwarzOperator(d, coarse_basis=raw, seed=2)
    ref = SchwarzOperator(d, coarse_basis=canonical, seed=2)
    np.testing.assert_allclose(op.to_dense(), ref.to_dense(), rtol=1e-13, atol=1e-16)
    assert op.rank_bound == ref.rank_bound
