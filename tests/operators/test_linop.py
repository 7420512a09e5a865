"""Public products accept what ``scipy.sparse.linalg.LinearOperator`` accepts, with its shapes.

The reference is scipy's own ``aslinearoperator`` of the dense matrix, applied
to the same inputs.
"""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ddops import (
    Decomposition1D,
    GlobalLowRankOperator,
    SchwarzOperator,
    TwoLevelSchwarz,
    poisson_1d,
)
from ddops.precond.schwarz import jacobi

# np.matrix inputs are part of scipy's contract, deprecated or not
pytestmark = pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")

N_ELEMENTS = 8  # 7 unknowns
n = N_ELEMENTS - 1


def _operators():
    d = Decomposition1D(N_ELEMENTS, 2, overlap=1)
    A = poisson_1d(N_ELEMENTS)
    rng = np.random.default_rng(0)
    base = sp.csr_matrix(rng.standard_normal((n, n)))  # non-symmetric, so M != M^T
    schwarz = SchwarzOperator(d, local_rank=2, seed=1, base=base)
    return {
        "schwarz": schwarz,
        "schwarz_adjoint": schwarz.H,
        "schwarz_local": schwarz.local_part(),
        "global": GlobalLowRankOperator(n, 3, seed=2),
        "two_level_ras": TwoLevelSchwarz(A, d, variant="restricted"),
        "jacobi": jacobi(A),
    }


OPERATORS = _operators()


class ArrayLike:
    """Not an array, but convertible by ``numpy.asarray``."""

    def __init__(self, values):
        self.values = np.asarray(values)

    def __array__(self, dtype=None, copy=None):
        return self.values if dtype is None else self.values.astype(dtype)


def _inputs():
    v = np.arange(1.0, n + 1)
    block = np.column_stack([v, v[::-1] - 3.0])
    return {
        "list": v.tolist(),
        "tuple": tuple(v),
        "int_list": list(range(n)),
        "int_array": np.arange(n),
        "bool_array": np.arange(n) % 2 == 0,
        "float32": v.astype(np.float32),
        "column": v[:, None],
        "nested_list_column": [[t] for t in v],
        "matrix_column": np.matrix(v).T,
        "array_like": ArrayLike(v),
        "memoryview": memoryview(v),
        "block": block,
        "nested_list_block": block.tolist(),
        "matrix_block": np.matrix(block),
        "fortran_block": np.asfortranarray(block),
        "strided_block": np.repeat(block, 2, axis=1)[:, ::2],
    }


INPUTS = _inputs()
METHODS = ("matvec", "rmatvec", "matmat", "rmatmat", "dot", "matmul")


def _call(op, method, x):
    return op @ x if method == "matmul" else getattr(op, method)(x)


def _scipy(op):
    dense = np.asarray(op @ np.eye(n), dtype=np.float64)
    return spla.aslinearoperator(dense), dense


@pytest.mark.parametrize("op_name", OPERATORS)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("input_name", INPUTS)
def test_products_follow_scipy(op_name, method, input_name):
    op, x = OPERATORS[op_name], INPUTS[input_name]
    if input_name == "memoryview" and method in ("dot", "matmul"):
        return  # numpy counts a memoryview as a scalar, so scipy's dot would scale the operator
    ref_op, dense = _scipy(op)
    try:
        expected = _call(ref_op, method, x)
    except ValueError:
        # scipy refuses it (a block for matvec, a vector for matmat): so must we,
        # with a message that names the argument
        with pytest.raises(ValueError, match=r"\b[xX] must have shape"):
            _call(op, method, x)
        return
    got = _call(op, method, x)
    assert type(got) is type(expected), (type(got), type(expected))
    assert got.shape == expected.shape
    assert got.dtype == op.dtype
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op_name", OPERATORS)
@pytest.mark.parametrize("fmt", ["csr_matrix", "csc_array", "coo_matrix", "lil_matrix"])
def test_sparse_inputs_are_densified(op_name, fmt):
    """scipy's own wrapper returns object arrays here; the products densify instead."""
    op = OPERATORS[op_name]
    _, dense = _scipy(op)
    X = np.zeros((n, 3))
    X[[0, 3, 6], [0, 1, 2]] = [1.0, -2.0, 0.5]
    S = getattr(sp, fmt)(X)
    for method, ref in (("matmat", dense @ X), ("rmatmat", dense.T @ X), ("dot", dense @ X),
                        ("matmul", dense @ X)):
        got = _call(op, method, S)
        assert isinstance(got, np.ndarray) and got.shape == (n, 3)
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    column = getattr(sp, fmt)(X[:, :1])
    for method, ref in (("matvec", dense @ X[:, :1]), ("rmatvec", dense.T @ X[:, :1])):
        got = _call(op, method, column)
        assert isinstance(got, np.ndarray) and got.shape == (n, 1)
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("method", METHODS)
def test_bad_inputs_name_the_argument(method):
    op = OPERATORS["schwarz"]
    name = "X" if method in ("matmat", "rmatmat") else "x"
    shape = (n,) if name == "x" else (n, 2)
    cases = [
        (np.ones(shape, dtype=complex), TypeError, rf"{name} must be real, got dtype complex"),
        (np.array(["a"] * n).reshape(shape[0], *shape[1:]) if name == "x" else
         np.full(shape, "a"), TypeError, rf"{name} must be real, got dtype <U1"),
        (np.full(shape, None), TypeError, rf"{name} must be real, got dtype object"),
        ([[1.0, 2.0]] + [[1.0]] * (n - 1), TypeError, rf"{name} must be an array of real"),
        (np.ones((n + 1,) + shape[1:]), ValueError, rf"{name} must have shape \({n},"),
        (np.ones((n, 1, 1)), ValueError, rf"{name} must have shape"),
        (np.float64(1.0) if method in ("dot", "matmul") else np.array(1.0), None, None),
        (np.full(shape, np.nan), ValueError, rf"{name} contains NaN or inf"),
    ]
    for x, exc, match in cases:
        if exc is None:
            if method == "matmul":  # scalars scale the operator (as op * 2 does in scipy)
                continue
            if method == "dot":
                assert isinstance(op.dot(x), spla.LinearOperator)
                continue
            exc, match = ValueError, rf"{name} must have shape"
        with pytest.raises(exc, match=match):
            _call(op, method, x)


def test_matvec_refuses_blocks_like_scipy():
    """A block goes to matmat: matvec keeps scipy's (n,) / (n, 1) contract."""
    op = OPERATORS["schwarz"]
    X = np.ones((n, 2))
    with pytest.raises(ValueError):
        spla.aslinearoperator(op.to_dense()).matvec(X)
    with pytest.raises(ValueError, match=r"x must have shape \(7,\) or \(7, 1\), got \(7, 2\)"):
        op.matvec(X)
    with pytest.raises(ValueError, match=r"X must have shape \(7, B\), got \(7,\)"):
        op.rmatmat(np.ones(n))
