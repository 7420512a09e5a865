"""The default coarse basis follows the decomposition; the hat bases refuse placeholder
coordinates; vector problems warn about a missing or misordered null space."""

import warnings

import numpy as np
import pytest

import ddops
from ddops.dd.coarse import auto_coarse_basis


def test_auto_is_the_paper_hats_in_1d_and_unchanged_there():
    A = ddops.poisson_1d(128)
    d = ddops.Decomposition1D(128, 8, overlap=2)
    assert auto_coarse_basis(d, matrix=True) == "interface_hats"
    M = ddops.TwoLevelSchwarz(A, d)
    assert M.coarse_basis_name == "interface_hats"
    np.testing.assert_array_equal(
        M.to_dense(), ddops.TwoLevelSchwarz(A, d, "interface_hats").to_dense())
    np.testing.assert_array_equal(ddops.coarse_basis(d).toarray(),
                                  ddops.coarse_basis(d, "interface_hats").toarray())
    op = ddops.SchwarzOperator(d, seed=3)
    assert op.coarse_basis_name == "interface_hats"


@pytest.mark.parametrize("make", ["from_matrix", "from_grid"])
def test_auto_is_gdsw_wherever_the_matrix_is_known(make):
    A = ddops.poisson_2d(16)
    d = (ddops.Decomposition.from_matrix(A, 4) if make == "from_matrix"
         else ddops.Decomposition.from_grid((16, 16), (2, 2)))
    M = ddops.TwoLevelSchwarz(A, d)  # failed before: the hats need 1D coordinates
    assert M.coarse_basis_name == "gdsw"
    # (to rounding: the preconditioner's extension takes its subdomains' elimination order)
    np.testing.assert_allclose(M.coarse_matrix.toarray(),
                               ddops.coarse_basis(d, "gdsw", A=A).toarray(), rtol=0,
                               atol=1e-13)
    np.testing.assert_array_equal(ddops.coarse_basis(d, A=A).toarray(),
                                  ddops.coarse_basis(d, "gdsw", A=A).toarray())
    # without the matrix (the learned operator without A): Nicolaides
    assert ddops.SchwarzOperator(d, seed=0).coarse_basis_name == "nicolaides"
    assert ddops.SchwarzOperator(d, seed=0, A=A).coarse_basis_name == "gdsw"


@pytest.mark.parametrize("problem", ["channels", "elasticity"])
def test_auto_stays_gdsw_on_a_heterogeneous_matrix(problem):
    """What ``docs/your-matrix.md`` says the default picks where an adaptive space would do
    better: GDSW (with the given null space), not GenEO, on high-contrast channels and on
    elasticity with stiff inclusions (rigid body modes given)."""
    if problem == "channels":
        A = ddops.problems.diffusion_2d(ddops.problems.high_contrast_channels(23, 1e6))
        d, Z = ddops.Decomposition.from_matrix(A, 6), None
    else:
        from ._elasticity import stiff_disks

        A, d, Z = stiff_disks(12, 1e6, count=10, radius=0.15)
    M = ddops.TwoLevelSchwarz(A, d, null_space=Z)
    assert M.coarse_basis_name == "gdsw"
    # (to rounding: the preconditioner builds it on the exactly symmetrised matrix)
    np.testing.assert_allclose(M.coarse_matrix.toarray(),
                               ddops.coarse_basis(d, "gdsw", A=A, null_space=Z).toarray(),
                               rtol=1e-12, atol=1e-14)
    assert ddops.TwoLevelSchwarz(A, d, "geneo", null_space=Z).coarse_basis_name == "geneo"


def test_auto_without_owner_is_nicolaides():
    A, X = ddops.poisson_2d(8, return_coordinates=True)
    d = ddops.Decomposition([np.arange(40), np.arange(30, 64)], 64, coordinates=X)
    M = ddops.TwoLevelSchwarz(A, d)
    assert M.coarse_basis_name == "nicolaides" and M.coarse_dim == 2


@pytest.mark.parametrize("kind", ["grid_hats", "interface_hats"])
def test_hat_bases_refuse_a_decomposition_without_coordinates(kind):
    A = ddops.poisson_1d(64)
    d = ddops.Decomposition.from_matrix(A, 4)
    assert not d.has_coordinates
    with pytest.raises(ValueError, match=f"{kind!r} needs the unknowns' coordinates"):
        ddops.coarse_basis(d, kind)
    with pytest.raises(ValueError, match="has none"):
        ddops.TwoLevelSchwarz(A, d, kind)
    # with the real 1D coordinates grid_hats works (and gives the points' hats)
    x = np.arange(1, 64) / 64
    dx = ddops.Decomposition.from_matrix(A, 4, coordinates=x)
    assert dx.has_coordinates
    P = ddops.coarse_basis(dx, "grid_hats", size=3).toarray()
    np.testing.assert_allclose(P[:, 1], np.maximum(0, 1 - np.abs(x - 0.5) * 4), atol=1e-12)


def test_interface_hats_message_no_longer_recommends_grid_hats():
    d = ddops.Decomposition1D(64, 1)
    with pytest.raises(ValueError) as exc:
        ddops.coarse_basis(d, "interface_hats")
    assert "grid_hats" not in str(exc.value) and "'auto'" in str(exc.value)


@pytest.fixture(scope="module")
def elasticity():
    fem = pytest.importorskip("ddops.problems.fem")
    pytest.importorskip("skfem")
    A, X = fem.fem_elasticity_2d(20)
    return A, ddops.rigid_body_modes(X), ddops.Decomposition.from_matrix(A, 16, 1, block_size=2)


@pytest.mark.parametrize("kind", ["nicolaides", "gdsw", "rgdsw"])
def test_block_size_without_null_space_warns(elasticity, kind):
    A, Z, d = elasticity
    with pytest.warns(RuntimeWarning, match="block_size=2 but no null_space"):
        ddops.coarse_basis(d, kind, A=A)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ddops.coarse_basis(d, kind, A=A, null_space=Z)  # interleaved rigid body modes: quiet


def test_field_major_null_space_is_detected(elasticity):
    A, Z, d = elasticity
    field_major = np.concatenate([Z[0::2], Z[1::2]])  # x components of all nodes, then y
    with pytest.warns(RuntimeWarning, match="not ordered like the unknowns"):
        ddops.TwoLevelSchwarz(A, d, "gdsw", null_space=field_major)
    # a null space that is only partly right but ordered right does not warn
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ddops.coarse_basis(d, "gdsw", A=A, null_space=Z[:, :2])


def test_misordering_warning_needs_a_quarter_of_the_parts(elasticity):
    """Rank lost on a few parts (degenerate ones) is quiet; on a quarter of them it warns."""
    from ddops.dd.coarse import check_null_space_layout

    _, Z, d = elasticity
    assert d.num_subdomains == 16
    for deficient, warns in ((3, False), (4, True)):
        Zd = Z.copy()
        Zd[np.isin(d.owner, np.arange(deficient)), 2] = 0.0  # no rotation on those parts
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_null_space_layout(d, Zd)
        found = [w for w in caught if "not ordered like the unknowns" in str(w.message)]
        assert bool(found) == warns, deficient
        if warns:
            assert f"lower rank on {deficient} of 16 parts" in str(found[0].message)


def test_two_level_docstring_lists_every_variant():
    from ddops.precond.schwarz import VARIANTS

    doc = ddops.TwoLevelSchwarz.__doc__
    line = next(t for t in doc.splitlines() if t.strip().startswith("variant :"))
    for variant in VARIANTS:
        assert f'"{variant}"' in line, variant
