import numpy as np
import pytest
import scipy.sparse as sp

from ddops import Decomposition, Decomposition1D, GlobalLowRankOperator, SchwarzOperator
from ddops.io import load_operator, save_operator


@pytest.mark.parametrize("make", [
    lambda: SchwarzOperator(Decomposition1D(40, 4, kind="dof"), coarse_rank=2, seed=3),
    lambda: SchwarzOperator(Decomposition1D(40, 4), coarse_basis="grid_hats", coarse_size=5,
                            partition="left", dtype=np.float32),
    lambda: SchwarzOperator(Decomposition1D(40, 4), coarse_basis=None),
    lambda: SchwarzOperator(Decomposition([[0, 1, 2, 3], [3, 4, 5]], 6),
                            coarse_basis=sp.csr_matrix(np.arange(12.0).reshape(6, 2) % 5)),
    lambda: GlobalLowRankOperator(20, 3, init="naive", seed=9),
    lambda: SchwarzOperator(Decomposition1D(40, 4), tied=True, base=sp.identity(39) * 2.0),
    lambda: SchwarzOperator(Decomposition1D(40, 4), tied=True, base=np.eye(39)),
])
def test_roundtrip(tmp_path, make):
    op = make()
    op.theta[...] += 0.5  # trained parameters differ from the seeded start
    path = save_operator(op, tmp_path / "model")
    assert path.suffix == ".npz"
    back = load_operator(path)
    assert type(back) is type(op) and back.dtype == op.dtype
    np.testing.assert_array_equal(back.to_dense(), op.to_dense())
    assert back.num_params == op.num_params and back.rank_bound == op.rank_bound


def test_rejects_bad_files(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.ones(2))
    with pytest.raises(ValueError, match="not a ddops operator file: it has no array 'meta'"):
        load_operator(tmp_path / "a.npz")
    np.savez(tmp_path / "b.npz", meta=np.array([{"a": 1}], dtype=object), theta=np.ones(2))
    with pytest.raises(ValueError, match="array 'meta' holds pickled Python objects"):
        load_operator(tmp_path / "b.npz")
    op = GlobalLowRankOperator(10, 2)
    path = save_operator(op, tmp_path / "c.npz")
    with np.load(path) as z:
        data = dict(z)
    data["theta"] = data["theta"][:-1]
    np.savez(tmp_path / "d.npz", **data)
    with pytest.raises(ValueError, match="parameter vector has shape"):
        load_operator(tmp_path / "d.npz")
    data["theta"] = np.full(40, np.nan)
    np.savez(tmp_path / "e.npz", **data)
    with pytest.raises(ValueError, match="parameters contain NaN"):
        load_operator(tmp_path / "e.npz")
    with pytest.raises(ValueError, match="does not exist"):
        load_operator(tmp_path / "missing.npz")


def test_operator_base_must_be_passed_again(tmp_path):
    import scipy.sparse.linalg as spla

    base = spla.aslinearoperator(sp.identity(39))
    op = SchwarzOperator(Decomposition1D(40, 4), tied=True, base=base)
    path = save_operator(op, tmp_path / "m.npz")
    with pytest.raises(ValueError, match="base="):
        load_operator(path)
    back = load_operator(path, base=base)
    np.testing.assert_array_equal(back.to_dense(), op.to_dense())


def test_learned_preconditioner_roundtrip(tmp_path):
    import ddops
    from ddops.precond.learned import learned_schwarz_preconditioner

    A = ddops.poisson_1d(64)
    op = learned_schwarz_preconditioner(A, Decomposition1D(64, 4), base="jacobi",
                                        init="classical")
    path = save_operator(op, tmp_path / "learned.npz")
    back = load_operator(path, base=op.base)
    np.testing.assert_allclose(back.to_dense(), op.to_dense(), rtol=1e-14, atol=0)
