"""``ddops.petsc.SchwarzPC`` in this process (one rank): options, errors, view, both routes.

The iteration and decomposition equivalence on 1, 2 and 4 ranks is in
``test_mpi.py``; here the PC's options and messages are checked, with the
serial library as the reference where a number is compared.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import ddops

from . import _cases
from ._petsc import petsc4py

_prefixes = itertools.count()


@pytest.fixture(scope="module")
def PETSc():
    return petsc4py()


@pytest.fixture
def prefix():
    return f"t{next(_prefixes)}_"


@pytest.fixture(scope="module")
def poisson(PETSc):
    A, _, _ = _cases.problem("poisson2d")
    P = _cases.petsc_matrix(A, PETSc.COMM_SELF)
    yield A, P
    P.destroy()


def solve(P, prefix, options, context=None):
    """Iterations, reason and the PC's context; the KSP is destroyed."""
    its, reason, ksp = _cases.petsc_cg(P, _cases.rhs(P.getSize()[0]), prefix, options, context)
    ctx = ksp.getPC().getPythonContext()
    ksp.destroy()
    return its, reason, ctx


def test_python_context_route_equals_serial(poisson, prefix):
    from ddops.petsc import SchwarzPC

    A, P = poisson
    its, reason, ctx = solve(P, prefix, {}, SchwarzPC(coarse="rgdsw", subdomains=8))
    d = ctx.parts.decomposition
    ref = ddops.Decomposition.from_matrix(A, 8, 1)  # METIS on the whole matrix, as one rank
    assert np.array_equal(d.owner, ref.owner) and np.array_equal(d.indices, ref.indices)
    s_its, s_info, M = _cases.serial_reference(A, ref, "rgdsw", b=_cases.rhs(A.shape[0]))
    assert reason > 0 and s_info == 0 and abs(its - s_its) <= 1
    assert ctx.preconditioner.coarse_dim == M.coarse_dim


def test_database_overrides_keywords(poisson, prefix):
    from ddops.petsc import SchwarzPC

    A, P = poisson
    its, _, ctx = solve(P, prefix, {"ddops_coarse": "gdsw", "ddops_subdomains": 6,
                                    "ddops_overlap": 2},
                        SchwarzPC(coarse="nicolaides", subdomains=8))
    assert (ctx.options.coarse, ctx.options.subdomains, ctx.options.overlap) == ("gdsw", 6, 2)
    ref = ddops.Decomposition.from_matrix(A, 6, 2)
    s_its, _, M = _cases.serial_reference(A, ref, "gdsw", b=_cases.rhs(A.shape[0]))
    assert abs(its - s_its) <= 1 and ctx.preconditioner.coarse_dim == M.coarse_dim


@pytest.mark.parametrize("option, value, match", [
    ("coarse", "foo", "-{p}ddops_coarse must be one of"),
    ("overlap", "x", "-{p}ddops_overlap must be an integer"),
    ("overlap", "-1", "-{p}ddops_overlap must be >= 0"),
    ("subdomains", "0", "-{p}ddops_subdomains must be >= 1"),
    ("variant", "bar", "-{p}ddops_variant must be one of"),
    ("partitioner", "baz", "-{p}ddops_partitioner must be one of"),
    ("local_solver", "qr", "-{p}ddops_local_solver must be one of"),
    ("null_space", "some", "-{p}ddops_null_space must be one of"),
])
def test_bad_option_is_named(poisson, prefix, option, value, match):
    _, P = poisson
    with pytest.raises(ValueError, match=match.format(p=prefix)):
        solve(P, prefix, {f"ddops_{option}": value})


@pytest.mark.parametrize("kwargs, error, match", [
    ({"coarse": "foo"}, ValueError, "coarse must be one of"),
    ({"overlap": 1.5}, TypeError, "overlap must be an integer"),
    ({"colour": "red"}, TypeError, "unknown options"),
])
def test_bad_keyword_is_named(PETSc, kwargs, error, match):
    from ddops.petsc import SchwarzPC

    with pytest.raises(error, match=match):
        SchwarzPC(**kwargs)


def test_matrix_errors(PETSc, poisson, prefix):
    _, P = poisson
    with pytest.raises(ValueError, match="MatSetNearNullSpace"):
        solve(P, prefix, {"ddops_null_space": "near"})
    with pytest.raises(ValueError, match="block size 3 does not divide"):
        solve(P, prefix + "b", {"ddops_block_size": 3})
    with pytest.raises(ValueError, match="needs the coordinates"):
        solve(P, prefix + "c", {"ddops_partitioner": "rcb"})
    dense = P.convert("dense", PETSc.Mat())  # a new matrix (without out=, in place)
    try:
        with pytest.raises(TypeError, match="AIJ matrix"):
            solve(dense, prefix + "d", {})
    finally:
        dense.destroy()


def test_rcb_with_coordinates_equals_from_matrix(poisson, prefix):
    from ddops.petsc import SchwarzPC

    A, P = poisson
    grid = ddops.Decomposition.from_grid((40, 40), (2, 2))  # only for its grid coordinates
    its, _, ctx = solve(P, prefix, {"ddops_partitioner": "rcb", "ddops_subdomains": 8},
                        SchwarzPC(coordinates=grid.coordinates))
    ref = ddops.Decomposition.from_matrix(A, 8, 1, partitioner="rcb",
                                          coordinates=grid.coordinates)
    assert np.array_equal(ctx.parts.decomposition.indices, ref.indices)
    s_its, _, _ = _cases.serial_reference(A, ref, "gdsw", b=_cases.rhs(A.shape[0]))
    assert abs(its - s_its) <= 1


def test_apply_transpose_of_the_restricted_variant(PETSc, poisson):
    from ddops.petsc import SchwarzPC

    A, P = poisson
    pc = PETSc.PC().create(comm=PETSc.COMM_SELF)
    pc.setOperators(P)
    pc.setType(PETSc.PC.Type.PYTHON)
    pc.setPythonContext(SchwarzPC(variant="restricted", subdomains=8))
    try:
        pc.setUp()
        x = P.createVecLeft()
        rng = np.random.default_rng(0)
        x.setArray(rng.standard_normal(A.shape[0]))
        y, yt = x.duplicate(), x.duplicate()
        pc.apply(x, y)
        pc.applyTranspose(x, yt)
        M = ddops.TwoLevelSchwarz(A, ddops.Decomposition.from_matrix(A, 8, 1),
                                  coarse_basis="gdsw", variant="restricted")
        xa = x.getArray(readonly=True)
        assert np.allclose(y.getArray(readonly=True), M.matvec(xa), rtol=1e-12, atol=1e-14)
        assert np.allclose(yt.getArray(readonly=True), M.rmatvec(xa), rtol=1e-12, atol=1e-14)
        assert not np.allclose(y.getArray(readonly=True), yt.getArray(readonly=True))
        for v in (x, y, yt):
            v.destroy()
    finally:
        pc.destroy()


def test_view_prints_what_was_built(PETSc, poisson, prefix, tmp_path):
    _, P = poisson
    _, _, ksp = _cases.petsc_cg(P, _cases.rhs(P.getSize()[0]), prefix, {"ddops_subdomains": 8})
    path = tmp_path / "view.txt"
    viewer = PETSc.Viewer().createASCII(str(path), comm=PETSc.COMM_SELF)
    try:
        ksp.view(viewer)
    finally:
        viewer.destroy()
        ksp.destroy()
    text = path.read_text()
    assert "ddops two-level Schwarz" in text and "variant additive" in text
    assert "subdomains: 8" in text and "coarse space: gdsw, dimension" in text
    assert "replicated on every rank" in text


class _TwoRanks:
    """Rank 0 of a two-rank communicator, as far as the checks before any fetch need one."""

    def Get_size(self):  # noqa: N802 - mpi4py's names
        return 2

    def Get_rank(self):  # noqa: N802
        return 0

    def allgather(self, value):
        return [value, value]

    # the set-up's agreement on failures (ddops.petsc._collective): rank 1 did not fail
    def irecv(self, source, tag):
        return _Done()

    def isend(self, value, dest, tag):
        return _Done()


class _Done:
    """A request that has completed with no message (rank 1's "no failure")."""

    def wait(self):
        return None

    def test(self):
        return True, None


def test_decomposition_from_rows_checks_its_input(PETSc):
    from ddops.petsc.decomposition import rank_decomposition_from_rows

    A, _, _ = _cases.problem("poisson2d")
    half = A[: A.shape[0] // 2].tocsr()
    with pytest.raises(ValueError, match=r"rows has 10 rows but row_range \(0, 11\) holds 11"):
        rank_decomposition_from_rows(A[:10], (0, 11))
    with pytest.raises(ValueError, match="overlap 2 on 2 ranks needs the rows of other ranks"):
        rank_decomposition_from_rows(half, (0, half.shape[0]), _TwoRanks(), subdomains=4,
                                     overlap=2)
    with pytest.raises(ValueError, match=r"fetch_rows returned 0 rows for the \d+ asked for"):
        rank_decomposition_from_rows(half, (0, half.shape[0]), _TwoRanks(), subdomains=4,
                                     overlap=2, fetch_rows=lambda wanted: A[:0])



def test_geneo_from_the_assembled_elasticity_matrix(PETSc, prefix):
    """``-ddops_coarse geneo`` on an elasticity Mat (not diagonally dominant): GenEO's
    oversampled local matrices from the assembled matrix, ``-ddops_geneo_oversampling``
    read from the database, the same space and iterations as the serial library."""
    import scipy.sparse.linalg as spla

    A, Z, b = _cases.problem("elasticity2d")
    P = _cases.petsc_matrix(A, PETSc.COMM_SELF, block_size=b, null_space=Z)
    try:
        its, reason, ctx = solve(P, prefix, {"ddops_coarse": "geneo", "ddops_subdomains": 8,
                                             "ddops_geneo_oversampling": 1})
    finally:
        P.destroy()
    M = ctx.preconditioner
    assert ctx.options.geneo_oversampling == 1 and M.coarse_stats["oversampling"] == 1
    ref = ddops.Decomposition.from_matrix(A, 8, 1, block_size=b)
    s = ddops.TwoLevelSchwarz(A, ref, options=ddops.SchwarzOptions(
        coarse="geneo", null_space=Z, geneo=ddops.GenEOOptions(oversampling=1)))
    assert s.coarse_stats["oversampling"] == 1 and M.coarse_dim == s.coarse_dim
    count = [0]
    _, info = spla.cg(A, _cases.rhs(A.shape[0]), M=s, rtol=_cases.RTOL, atol=0.0,
                      maxiter=1000, callback=lambda _x: count.__setitem__(0, count[0] + 1))
    assert reason > 0 and info == 0 and abs(its - count[0]) <= 1
