"""One input contract for matrices: every entry point gives the same message for the same bad
matrix (a LinearOperator, complex entries, an empty row), and Trainer checks its sampler."""

import re

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ddops
from ddops.dd.partition import partition
from ddops.learning.data import MatrixRHS
from ddops.learning.spectral import inverse_eigenvalues
from ddops.learning.training import Trainer, TrainingConfig
from ddops.precond.learned import classical_init, learned_schwarz_preconditioner
from ddops.precond.schwarz import jacobi

A = ddops.poisson_2d(8)
D = ddops.Decomposition.from_matrix(A, 4)


def entry_points():
    """Every public function that reads the entries of a matrix ``A``, as ``f(A)``."""
    return {
        "Decomposition.from_matrix": lambda M: ddops.Decomposition.from_matrix(M, 4),
        "partition": lambda M: partition(M, 4),
        "TwoLevelSchwarz": lambda M: ddops.TwoLevelSchwarz(M, D),
        "coarse_basis gdsw": lambda M: ddops.coarse_basis(D, "gdsw", A=M),
        "coarse_basis geneo": lambda M: ddops.coarse_basis(D, "geneo", A=M),
        "jacobi": jacobi,
        "learned_schwarz_preconditioner": lambda M: learned_schwarz_preconditioner(M, D, 2),
        "classical_init": lambda M: classical_init(ddops.SchwarzOperator(D, tied=True), M),
        "inverse_eigenvalues": inverse_eigenvalues,
    }


@pytest.mark.parametrize("name", list(entry_points()))
def test_a_linear_operator_gets_the_same_type_error_everywhere(name):
    f = entry_points()[name]
    with pytest.raises(TypeError) as exc:
        f(spla.aslinearoperator(A))
    assert str(exc.value).startswith("A must be a sparse matrix (scipy.sparse) or a 2-D array, "
                                     "got a MatrixLinearOperator"), (name, str(exc.value))


@pytest.mark.parametrize("name", list(entry_points()))
def test_complex_and_non_square_matrices_get_the_same_message_everywhere(name):
    f = entry_points()[name]
    with pytest.raises(TypeError, match=r"^A must be real, got dtype complex128"):
        f(A * 1j)
    with pytest.raises(ValueError, match=r"^A must be square, got shape \(64, 63\)"):
        f(A[:, :63])


@pytest.mark.parametrize("name", [k for k in entry_points() if k != "inverse_eigenvalues"])
def test_an_empty_row_is_named_by_its_index(name):
    f = entry_points()[name]
    B = A.tolil()
    B[37, :] = 0.0
    B[:, 37] = 0.0
    with pytest.raises(ValueError) as exc:
        f(B.tocsr())
    assert re.search(r"\brow 37 is empty\b", str(exc.value)), (name, str(exc.value))


def test_the_empty_row_message_counts_the_others():
    from ddops._validation import check_no_empty_rows

    B = A.tolil()
    for i in (5, 37, 50):
        B[i, :] = 0.0
    B = B.tocsr()
    C = A.tocsr().copy()  # row 9: stored entries, all explicit zeros (and a zero diagonal)
    C.data[C.indptr[9]:C.indptr[10]] = 0.0
    with pytest.raises(ValueError, match=r"^A: row 5 is empty \(and 2 more\): A is singular"):
        check_no_empty_rows(B)
    with pytest.raises(ValueError, match=r"^M: row 9 is empty: M is singular"):
        check_no_empty_rows(C, "M")
    check_no_empty_rows(A - sp.diags(A.diagonal()))  # zero diagonal, nonzero rows: fine


@pytest.mark.parametrize("name", [k for k in entry_points() if k != "inverse_eigenvalues"])
def test_the_callers_matrix_stays_as_it_is(name):
    """A non-canonical CSR (duplicate entries, unsorted) with read-only arrays is not changed."""
    f = entry_points()[name]
    coo = A.tocoo()
    half = 0.5 * coo.data
    rows = np.concatenate([coo.row, coo.row])[::-1]  # every entry twice, reversed order
    cols = np.concatenate([coo.col, coo.col])[::-1]
    vals = np.concatenate([half, half])[::-1]
    B = sp.csr_matrix((vals, (rows, cols)), shape=A.shape)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=A.shape[0]))])
    order = np.argsort(rows, kind="stable")
    B = sp.csr_matrix((vals[order], cols[order], indptr), shape=A.shape)  # duplicates kept
    assert not B.has_canonical_format
    arrays = [B.data, B.indices, B.indptr]
    before = [a.copy() for a in arrays]
    for a in arrays:
        a.flags.writeable = False
    f(B)
    for a, b in zip(arrays, before, strict=True):
        np.testing.assert_array_equal(a, b)
    assert B.nnz == before[0].size


class _Sized:
    """A sampler without num_dofs (checked on its first batch)."""

    def __init__(self, n):
        self.n = n

    def sample(self, batch_size, rng):
        F = rng.standard_normal((self.n, batch_size))
        return F, F.copy()


def test_trainer_checks_the_sampler_size_at_construction():
    op = ddops.SchwarzOperator(D, local_rank=2)
    wrong = MatrixRHS(ddops.poisson_2d(7), size=4)
    with pytest.raises(ValueError, match=r"sampler draws right-hand sides of size 49 .* "
                                         r"operator has size 64"):
        Trainer(op, wrong, TrainingConfig(steps=2))
    with pytest.raises(TypeError, match="sampler must have a method sample"):
        Trainer(op, object(), TrainingConfig(steps=2))
    # without num_dofs: on the first batch, before any loss is computed
    trainer = Trainer(op, _Sized(50), TrainingConfig(steps=2))
    with pytest.raises(ValueError, match=r"sampler draws right-hand sides of size 50 .*size 64"):
        trainer.run()
    Trainer(op, _Sized(64), TrainingConfig(steps=2)).run()  # the right size trains


def test_sparse_formats_and_integer_matrices_are_accepted_alike():
    ref = ddops.TwoLevelSchwarz(A, D).to_dense()
    for M in (A.tocoo(), A.tocsc(), sp.csr_array(A), A.toarray(), A.astype(np.int64)):
        np.testing.assert_allclose(ddops.TwoLevelSchwarz(M, D).to_dense(), ref, rtol=1e-12)
