"""``ddops precond --matrix FILE``: a user's matrix, right-hand side, coordinates, null space
and kernel from files, checked against the library called directly."""

import json

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import ddops
from ddops.experiments.cli import main

from ._precond import QUIET, cg_iterations, run


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("matrix")
    A = ddops.poisson_2d(24)
    scipy.io.mmwrite(root / "poisson.mtx", A)
    sp.save_npz(root / "poisson.npz", A)
    b = np.random.default_rng(7).standard_normal(A.shape[0])
    np.save(root / "b.npy", b)
    n = 24
    T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tolil()
    T[0, 0] = T[-1, -1] = 1.0
    N = (sp.kron(T.tocsr(), sp.identity(n)) + sp.kron(sp.identity(n), T.tocsr())).tocsr()
    sp.save_npz(root / "neumann.npz", N)
    np.save(root / "ones.npy", np.ones(N.shape[0]))
    np.save(root / "short.npy", np.ones(10))
    return root, A, b, N


def test_matrix_market_file_matches_the_library(files, tmp_path):
    root, A, b, _ = files
    payload, rows, table = run(tmp_path, "mtx", "--matrix", str(root / "poisson.mtx"),
                               "--rhs", str(root / "b.npy"), "--subdomains", "6")
    d = ddops.Decomposition.from_matrix(A, 6, 1)
    expected = cg_iterations(A, b, ddops.TwoLevelSchwarz(A, d, "gdsw"))
    assert rows["two_level"]["iterations"] == expected
    assert rows["two_level"]["coarse_basis"] == "gdsw"
    assert payload["config"]["problem"] == "matrix" and payload["unknowns"] == A.shape[0]
    assert "poisson.mtx" in table and "b.npy" in table
    # the same matrix as scipy .npz gives the same table rows
    _, rows_npz, _ = run(tmp_path, "npz", "--matrix", str(root / "poisson.npz"),
                         "--rhs", str(root / "b.npy"), "--subdomains", "6")
    assert {k: r["iterations"] for k, r in rows_npz.items()} == \
        {k: r["iterations"] for k, r in rows.items()}


def test_singular_matrix_with_kernel(files, tmp_path):
    root, _, _, N = files
    b = np.random.default_rng(1).standard_normal(N.shape[0])  # inconsistent on purpose
    np.save(tmp_path / "bn.npy", b)
    for kernel in ("constants", str(root / "ones.npy")):
        _, rows, _ = run(tmp_path, "neu", "--matrix", str(root / "neumann.npz"), "--kernel",
                         kernel, "--rhs", str(tmp_path / "bn.npy"), "--subdomains", "6")
        for key in ("one_level", "two_level"):
            assert rows[key]["converged"], (kernel, key)
        d = ddops.Decomposition.from_matrix(N, 6, 1)
        M = ddops.TwoLevelSchwarz(N, d, "gdsw", kernel=np.ones(N.shape[0]))
        assert rows["two_level"]["iterations"] == cg_iterations(N, b - b.mean(), M)
    # without the kernel the two-level row explains that A is singular, in one line
    assert main(["precond", "--matrix", str(root / "neumann.npz"), "--subdomains", "6",
                 "--save-prefix", str(tmp_path / "x"), *QUIET]) == 2


def test_elasticity_file_with_coordinates_and_rigid_null_space(tmp_path):
    fem = pytest.importorskip("ddops.problems.fem")
    pytest.importorskip("skfem")
    A, X = fem.fem_elasticity_2d(14)
    scipy.io.mmwrite(tmp_path / "el.mtx", A)
    np.save(tmp_path / "X.npy", X)
    Z = ddops.rigid_body_modes(X)
    np.save(tmp_path / "Z.npy", Z)
    common = ["--matrix", str(tmp_path / "el.mtx"), "--block-size", "2", "--subdomains", "8"]
    _, rigid, _ = run(tmp_path, "r", *common, "--coordinates", str(tmp_path / "X.npy"),
                      "--null-space", "rigid")
    _, from_file, _ = run(tmp_path, "f", *common, "--null-space", str(tmp_path / "Z.npy"))
    assert rigid["two_level"]["iterations"] == from_file["two_level"]["iterations"]
    d = ddops.Decomposition.from_matrix(A, 8, 1, block_size=2)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    M = ddops.TwoLevelSchwarz(A, d, "gdsw", null_space=Z)
    assert rigid["two_level"]["iterations"] == cg_iterations(A, b, M)
    # and rcb reads the coordinates
    _, rcb, _ = run(tmp_path, "rcb", *common, "--coordinates", str(tmp_path / "X.npy"),
                    "--null-space", "rigid", "--partitioner", "rcb")
    assert rcb["two_level"]["converged"]


def test_matrix_file_with_every_coarse_space(tmp_path):
    """``--matrix FILE --coarse all`` on an assembled elasticity matrix with stiff disks:
    the adaptive rows come from the matrix alone (GenEO's oversampled local matrices, no
    finite-element ones), and GenEO's row is the library's ``coarse_basis="geneo"``."""
    pytest.importorskip("skfem")
    from tests.dd._elasticity import stiff_disks

    A, d, Z = stiff_disks(12, 1e6, count=10, radius=0.15)
    scipy.io.mmwrite(tmp_path / "stiff.mtx", A)
    np.save(tmp_path / "Z.npy", Z)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    np.save(tmp_path / "b.npy", b)
    _, rows, _ = run(tmp_path, "all", "--matrix", str(tmp_path / "stiff.mtx"), "--block-size",
                     "2", "--null-space", str(tmp_path / "Z.npy"), "--rhs",
                     str(tmp_path / "b.npy"), "--subdomains", "8", "--coarse", "all",
                     "--no-memory")
    for kind in ("gdsw", "rgdsw", "agdsw", "geneo"):
        r = rows[f"two_level_{kind}"]
        assert r["failed"] is None and r["coarse_basis"] == kind, kind
    geneo = rows["two_level_geneo"]
    assert geneo["neumann"] == "algebraic" and geneo["coarse_stats"]["oversampling"] >= 1
    M = ddops.TwoLevelSchwarz(A, d, "geneo", null_space=Z)
    assert geneo["coarse_dim"] == M.coarse_dim
    assert geneo["iterations"] == cg_iterations(A, b, M)
    # fewer iterations than the default's (measured 27 against 79)
    assert 2 * geneo["iterations"] < rows["two_level_gdsw"]["iterations"]


@pytest.mark.parametrize("argv, message", [
    (["--matrix", "missing.mtx"], "matrix: no such file"),
    (["--matrix", "{root}/b.npy"], "holds an array of shape (576,), not a matrix"),
    (["--matrix", "{root}/poisson.txt"], "has extension '.txt'"),
    (["--matrix", "{root}/poisson.mtx", "--rhs", "{root}/short.npy"], "has 10 rows"),
    (["--matrix", "{root}/poisson.mtx", "--kernel", "{root}/short.npy"], "has 10 rows"),
    (["--matrix", "{root}/poisson.mtx", "--null-space", "rigid"], "'rigid' needs"),
    (["--matrix", "{root}/poisson.mtx", "--n", "8"], "n: not used with"),
    (["--matrix", "{root}/poisson.mtx", "--partitioner", "rcb"], "'rcb' needs"),
    (["--matrix", "{root}/poisson.mtx", "--block-size", "5"], "=5 does not divide the 576"),
    (["--matrix", "{root}/poisson.mtx", "--train-steps", "3"], "only used with"),
    (["--rhs", "{root}/b.npy"], "only used with"),
    (["--matrix", "{root}/poisson.mtx", "--kernel", "constants"], "not in the kernel of A"),
])
def test_bad_files_and_flags_give_one_line(files, tmp_path, capsys, argv, message):
    root = files[0]
    (root / "poisson.txt").write_text("1 2\n")
    argv = [a.format(root=root) for a in argv]
    assert main(["precond", *argv, "--save-prefix", str(tmp_path / "x"), *QUIET]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert message in err, err


def test_no_train_labels_the_paper_row_untrained(tmp_path):
    payload, rows, table = run(tmp_path, "nt", "--n", "64", "--subdomains", "2", "--no-train")
    assert "paper training" not in table
    assert rows["paper"]["label"] == "Schwarz attention, untrained (initialisation)"
    assert json.dumps(payload)  # the payload stays JSON


def test_the_files_are_read_once(files, tmp_path, monkeypatch):
    import ddops.problems as problems

    root = files[0]
    calls = []
    original = problems.load_matrix

    def counting(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(problems, "load_matrix", counting)
    run(tmp_path, "once", "--matrix", str(root / "poisson.mtx"), "--subdomains", "4")
    assert len(calls) == 1  # validation reads and checks it, the run reuses it
