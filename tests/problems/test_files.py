"""Reading a user's matrix and vectors: what comes back, and a message naming option and file."""

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import ddops
from ddops.problems import load_array, load_matrix


@pytest.fixture(scope="module")
def A():
    return ddops.poisson_2d(6).tocsr()


def test_every_matrix_format_gives_back_the_matrix(A, tmp_path):
    scipy.io.mmwrite(tmp_path / "a.mtx", A)
    sp.save_npz(tmp_path / "a.npz", A)
    np.save(tmp_path / "a.npy", A.toarray())
    for name in ("a.mtx", "a.npz", "a.npy"):
        M = load_matrix(tmp_path / name, "--matrix")
        assert sp.isspmatrix_csr(M)
        np.testing.assert_array_equal(M.toarray(), A.toarray())


def test_every_array_format_and_the_column_squeeze(tmp_path):
    x = np.arange(6.0)
    np.save(tmp_path / "x.npy", x)
    scipy.io.mmwrite(tmp_path / "x.mtx", x[:, None])
    np.save(tmp_path / "col.npy", x[:, None])
    np.testing.assert_array_equal(load_array(tmp_path / "x.npy", "--rhs", rows=6), x)
    np.testing.assert_array_equal(load_array(tmp_path / "x.mtx", "--rhs", ndim=(1,)), x)
    # an (n, 1) column is a vector where only vectors are allowed, a block otherwise
    assert load_array(tmp_path / "col.npy", "--rhs", ndim=(1,)).shape == (6,)
    assert load_array(tmp_path / "col.npy", "--null-space").shape == (6, 1)
    assert load_array(tmp_path / "x.npy", "--rhs").dtype == np.float64


@pytest.mark.parametrize("name, write, match", [
    ("m.txt", lambda p: p.write_text("1"), r"--matrix: '.*m\.txt' has extension '\.txt'"),
    ("gone.mtx", None, r"--matrix: no such file '.*gone\.mtx'"),
    ("bad.npz", lambda p: p.write_bytes(b"PK\x03\x04truncated"), r"--matrix: cannot read "
     r"'.*bad\.npz'"),
    ("vec.npy", lambda p: np.save(p, np.ones(4)), r"holds an array of shape \(4,\), not a matrix"),
    ("rect.npy", lambda p: np.save(p, np.ones((3, 4))), r"holds a 3 x 4 matrix; a square one"),
    ("cplx.npy", lambda p: np.save(p, np.eye(3) * 1j), r"holds complex128 entries; a real"),
])
def test_bad_matrix_files_are_named(tmp_path, name, write, match):
    path = tmp_path / name
    if write is not None:
        write(path)
    with pytest.raises(ValueError, match=match):
        load_matrix(path, "--matrix")


@pytest.mark.parametrize("name, write, kwargs, match", [
    ("nan.npy", lambda p: np.save(p, np.array([1.0, np.nan])), {},
     r"--rhs: '.*nan\.npy' contains NaN or inf"),
    ("inf.npy", lambda p: np.save(p, np.array([1.0, np.inf])), {}, r"contains NaN or inf"),
    ("cplx.npy", lambda p: np.save(p, np.ones(3) * 1j), {}, r"holds complex128 values; real"),
    ("rows.npy", lambda p: np.save(p, np.ones(3)), {"rows": 4},
     r"--rhs: '.*rows\.npy' has 3 rows; the matrix has 4"),
    ("block.npy", lambda p: np.save(p, np.ones((3, 2))), {"ndim": (1,)},
     r"holds an array of shape \(3, 2\); expected 1-D"),
    ("bad.npy", lambda p: p.write_bytes(b"not numpy"), {}, r"--rhs: cannot read '.*bad\.npy'"),
])
def test_bad_array_files_are_named(tmp_path, name, write, kwargs, match):
    path = tmp_path / name
    write(path)
    with pytest.raises(ValueError, match=match):
        load_array(path, "--rhs", **kwargs)


@pytest.mark.parametrize("stored", [np.array([3, -1, 0, 7], dtype=np.int32),
                                    np.array([3, 1, 0, 7], dtype=np.uint8),
                                    np.array([-(2**53), 2**53 - 1, 5, 0], dtype=np.int64),
                                    np.array([True, False, True, True])])
@pytest.mark.parametrize("suffix", [".npy", ".mtx"])
def test_integer_and_boolean_arrays_are_float64(tmp_path, stored, suffix):
    path = tmp_path / f"x{suffix}"
    if suffix == ".npy":
        np.save(path, stored)
    else:  # Matrix Market has no boolean field: the integer field, as a user writes it
        lines = ["%%MatrixMarket matrix array integer general", f"{stored.size} 1"]
        path.write_text("\n".join(lines + [str(int(v)) for v in stored]) + "\n")
    X = load_array(path, "--null-space", rows=4)
    assert X.dtype == np.float64
    assert X.shape == ((4,) if suffix == ".npy" else (4, 1))  # .mtx arrays are 2-D
    expected = [float(int(v)) for v in stored]  # exact: every value is below 2**53
    np.testing.assert_array_equal(X.ravel(), expected)


@pytest.mark.parametrize("value", [2**53 + 1, -(2**53) - 1])
def test_integers_float64_would_round_are_refused(tmp_path, value):
    np.save(tmp_path / "big.npy", np.array([1, value], dtype=np.int64))
    with pytest.raises(ValueError, match=r"--rhs: '.*big\.npy' holds integers beyond 2\*\*53"):
        load_array(tmp_path / "big.npy", "--rhs")
    np.save(tmp_path / "ok.npy", np.array([1, 2**53], dtype=np.uint64))
    assert load_array(tmp_path / "ok.npy", "--rhs")[1] == 2.0**53
