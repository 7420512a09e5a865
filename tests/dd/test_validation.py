"""The matrix checks of the coarse-space builders: the symmetric part, and one check per set-up."""

import numpy as np
import pytest
import scipy.sparse as sp

import ddops
import ddops.dd.validation as validation
import ddops.precond.schwarz as schwarz
from ddops.problems import poisson_2d


def _rounding_unsymmetric(n: int = 12) -> sp.csr_matrix:
    """A symmetric pattern whose values differ from their transposes by rounding."""
    A = poisson_2d(n).tocsr()
    A.data = A.data * (1.0 + 1e-15 * np.random.default_rng(0).standard_normal(A.nnz))
    return A


@pytest.mark.parametrize("structural", [False, True])
def test_symmetric_part_is_the_dense_average(structural):
    A = _rounding_unsymmetric()
    if structural:  # one coupling on one side only (a pattern that differs from A^T's)
        A = sp.lil_matrix(A)
        A[0, 5] = -1e-3
        A = A.tocsr()
    asym, exact, T = validation.symmetry_defect(A, return_transpose=True)
    assert not exact and asym > 0
    S = validation.symmetric_part(A, T)
    dense = A.toarray()
    np.testing.assert_array_equal(S.toarray(), (dense + dense.T) / 2)
    assert (S != S.T).nnz == 0  # exactly symmetric
    assert S.has_canonical_format


def _count_symmetry_checks(monkeypatch) -> list:
    calls = []
    original = validation.symmetry_defect

    def counting(A, **kwargs):
        calls.append(A.shape)
        return original(A, **kwargs)

    monkeypatch.setattr(validation, "symmetry_defect", counting)
    monkeypatch.setattr(schwarz, "symmetry_defect", counting)
    return calls


def test_checked_once_passes_its_own_arrays_only(monkeypatch):
    calls = _count_symmetry_checks(monkeypatch)
    A = poisson_2d(8).tocsr()
    other = poisson_2d(9).tocsr()
    with validation.checked_once(A) as checked:
        assert len(calls) == 1
        validation.check_matrix(sp.csr_matrix(checked))  # a rewrapped view: passed at once
        validation.check_matrix(checked, rows=False)
        assert len(calls) == 1
        validation.check_matrix(other)  # another matrix: checked
        assert len(calls) == 2
        with pytest.raises(ValueError, match="not symmetric"):
            validation.check_matrix(sp.triu(A, format="csr"))
    validation.check_matrix(A)  # after the block: checked again
    assert len(calls) == 4


def test_exactly_symmetric_skips_only_the_symmetry_test(monkeypatch):
    calls = _count_symmetry_checks(monkeypatch)
    A = poisson_2d(8).tocsr()
    with validation.exactly_symmetric(A):
        validation.check_matrix(sp.csr_matrix(A))
        assert calls == []
    negative = A.copy()
    negative.data[negative.indices == np.repeat(np.arange(64), np.diff(negative.indptr))] *= -1
    with validation.exactly_symmetric(negative):
        with pytest.raises(ValueError, match="not positive definite"):
            validation.check_matrix(negative)  # the other checks still run


@pytest.mark.parametrize("coarse", ["gdsw", "rgdsw", "agdsw"])
def test_a_setup_checks_the_symmetry_once(monkeypatch, coarse):
    A = poisson_2d(24).tocsr()
    d = ddops.Decomposition.from_matrix(A, 6)
    calls = _count_symmetry_checks(monkeypatch)
    ddops.TwoLevelSchwarz(A, d, coarse_basis=coarse)
    assert len(calls) == 1  # TwoLevelSchwarz's own: the builders do not repeat it


def test_a_setup_on_a_rounding_unsymmetric_matrix_is_that_of_its_symmetric_part():
    A = _rounding_unsymmetric(24)
    dense = A.toarray()
    S = sp.csr_matrix((dense + dense.T) / 2)
    d = ddops.Decomposition.from_matrix(S, 6)
    x = np.random.default_rng(1).standard_normal(A.shape[0])
    for coarse in ("gdsw", "agdsw"):
        y = ddops.TwoLevelSchwarz(A, d, coarse_basis=coarse) @ x
        np.testing.assert_array_equal(y, ddops.TwoLevelSchwarz(S, d, coarse_basis=coarse) @ x)


@pytest.mark.parametrize("coarse", ["gdsw", "rgdsw", "agdsw", "geneo"])
def test_a_coarse_basis_checks_the_matrix_once(monkeypatch, coarse):
    from ddops.dd.coarse import coarse_basis

    A = poisson_2d(24).tocsr()
    d = ddops.Decomposition.from_matrix(A, 6)
    calls = _count_symmetry_checks(monkeypatch)
    coarse_basis(d, coarse, A=A)
    assert len(calls) == 1  # where A enters; not again in each builder it passes through


def test_known_exact_symmetry_survives_the_nesting_of_the_blocks():
    """``exactly_symmetric`` vouches for the pattern too; ``checked_once`` alone does not
    (its check allows rounding); nested either way, both facts stay known."""
    A = poisson_2d(8).tocsr()
    other = poisson_2d(9).tocsr()
    assert not validation.known_exactly_symmetric(A)
    with validation.checked_once(A) as checked:
        assert not validation.known_exactly_symmetric(checked)
        with validation.exactly_symmetric(checked):
            assert validation.known_exactly_symmetric(sp.csr_matrix(checked))
            assert validation._vouched(checked) is True  # still checked
    with validation.exactly_symmetric(A):
        assert validation.known_exactly_symmetric(sp.csr_matrix(A))
        assert not validation.known_exactly_symmetric(other)
        with validation.checked_once(A) as checked:
            assert validation.known_exactly_symmetric(checked)
    assert not validation.known_exactly_symmetric(A)


@pytest.mark.parametrize("coarse", ["gdsw", "rgdsw"])
def test_the_interface_graph_of_a_setup_needs_no_transpose(monkeypatch, coarse):
    """Inside a set-up the interface classification knows A's pattern is symmetric (its
    graph is then A's pattern less the diagonal, without a transpose) and the graph equals
    the one built with the transpose."""
    from ddops.dd import interface

    A = _rounding_unsymmetric(24)
    d = ddops.Decomposition.from_matrix(A, 6)
    seen, original = [], interface._graph

    def recording(M):
        known = validation.known_exactly_symmetric(M)
        G = original(M)
        seen.append(known)
        with monkeypatch.context() as m:
            m.setattr(interface, "known_exactly_symmetric", lambda _: False)
            reference = original(M)
        assert (G != reference).nnz == 0 and G.has_sorted_indices
        return G

    monkeypatch.setattr(interface, "_graph", recording)
    ddops.TwoLevelSchwarz(A, d, coarse_basis=coarse)
    assert seen == [True]


@pytest.mark.parametrize("symmetric_pattern", [True, False])
def test_the_interface_graph_against_the_dense_union(symmetric_pattern):
    """The interface's graph: i != j adjacent when A_ij or A_ji is stored, from the dense
    pattern here, for a symmetric pattern and a one-sided one."""
    from ddops.dd import interface

    A = poisson_2d(6).tocsr()
    if not symmetric_pattern:
        A = A.tolil()
        A[0, 20] = 1e-3  # one-sided couplings
        A[7, 30] = -2e-3
        A = A.tocsr()
    dense = A.toarray() != 0
    expected = (dense | dense.T) & ~np.eye(A.shape[0], dtype=bool)
    G = interface._graph(A)
    np.testing.assert_array_equal(G.toarray(), expected)
    assert G.dtype == bool and G.has_sorted_indices
