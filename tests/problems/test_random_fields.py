"""High-contrast coefficients of ddops.problems.random_fields against their defining properties."""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import ddops.problems
from ddops.problems import (
    coefficient_contrast,
    diffusion_2d,
    diffusion_3d,
    layered_coefficient,
    lognormal_field,
    random_inclusions,
    stiff_inclusions,
)


def correlation(a, b):
    a = a - a.mean()
    b = b - b.mean()
    return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))


def lag_correlation(g, lag, axis):
    """Empirical correlation of g with itself shifted by ``lag`` cells along ``axis``."""
    n = g.shape[axis]
    return correlation(np.take(g, range(n - lag), axis), np.take(g, range(lag, n), axis))


# ---------------------------------------------------------------------------
# coefficient_contrast


def test_coefficient_contrast():
    assert coefficient_contrast([2.0, 8.0, 4.0]) == 4.0
    assert coefficient_contrast(np.full((3, 3), 7.0)) == 1.0


@pytest.mark.parametrize(
    "c,error,match",
    [
        ([1.0, 0.0], ValueError, "c must be > 0"),
        ([1.0, -2.0], ValueError, "c must be > 0"),
        ([1.0, np.nan], ValueError, "c contains NaN"),
        ([1.0, np.inf], ValueError, "c contains NaN or inf"),
        (sp.csr_matrix(np.ones((2, 2))), TypeError, "c must be a dense array"),
        ([], ValueError, "c must not be empty"),
        (["a"], TypeError, "c must be a real"),
    ],
)
def test_coefficient_contrast_rejects_bad_input(c, error, match):
    with pytest.raises(error, match=match):
        coefficient_contrast(c)


# ---------------------------------------------------------------------------
# lognormal_field


@pytest.mark.parametrize("dim,n", [(2, 1), (2, 20), (3, 1), (3, 11)])
@pytest.mark.parametrize("contrast", [10.0, 1e6])
def test_lognormal_field_shape_contrast_and_geometric_mean(dim, n, contrast):
    c = lognormal_field(n, dim=dim, contrast=contrast, correlation_length=0.2, seed=5)
    assert c.shape == (n + 1,) * dim and c.dtype == np.float64
    assert np.all(c > 0)
    assert c.max() / c.min() == pytest.approx(contrast, rel=1e-10)
    assert np.exp(np.log(c).mean()) == pytest.approx(1.0, abs=1e-12)
    # not two-valued: a genuine field
    assert np.unique(c).size > (n + 1) ** dim // 2


def test_lognormal_field_plugs_into_diffusion():
    A = diffusion_2d(lognormal_field(7, contrast=1e3))
    assert A.shape == (49, 49)
    assert diffusion_3d(lognormal_field(3, dim=3)).shape == (27, 27)


def test_lognormal_field_contrast_one_is_constant():
    np.testing.assert_array_equal(lognormal_field(6, contrast=1.0), np.ones((7, 7)))
    np.testing.assert_array_equal(lognormal_field(3, dim=3, contrast=1), np.ones((4, 4, 4)))


def test_lognormal_field_is_reproducible_and_depends_on_seed():
    a = lognormal_field(15, seed=3)
    np.testing.assert_array_equal(a, lognormal_field(15, seed=3))
    np.testing.assert_array_equal(a, lognormal_field(15, seed=np.random.default_rng(3)))
    b = lognormal_field(15, seed=4)
    assert correlation(np.log(a), np.log(b)) < 0.9
    assert np.abs(np.log(a) - np.log(b)).max() > 0.5


def test_lognormal_field_has_the_gaussian_covariance_2d():
    # cov(g(x), g(y)) = exp(-|x - y|^2 / (2 ell^2)) with ell in units of the unit square:
    # ell = 0.03 is 7.68 cells of the 256 x 256 field
    n, ell = 255, 0.03
    ell_cells = ell * (n + 1)
    fields = [np.log(lognormal_field(n, correlation_length=ell, seed=s)) for s in (0, 1)]
    measured = {}
    for lag in (1, 4, 8, 12):
        measured[lag] = np.mean([lag_correlation(g, lag, a) for g in fields for a in (0, 1)])
        expected = np.exp(-(lag**2) / (2 * ell_cells**2))
        assert measured[lag] == pytest.approx(expected, abs=0.07), lag
    # smooth at the origin (Gaussian, not exponential covariance: 1 - 1/ell_cells = 0.87)
    assert measured[1] > 0.98
    # at a lag of one correlation length clearly below the lag-1 correlation
    assert measured[8] < measured[1] - 0.3
    # not periodic over the domain: opposite sides are far apart, not neighbours
    opposite = np.mean([correlation(g[:, 0], g[:, -1]) for g in fields]
                       + [correlation(g[0], g[-1]) for g in fields])
    assert abs(opposite) < 0.5


def test_lognormal_field_correlation_scales_with_correlation_length_3d():
    n = 47
    short = np.log(lognormal_field(n, dim=3, correlation_length=0.03, seed=2))
    long = np.log(lognormal_field(n, dim=3, correlation_length=0.12, seed=2))
    lag = 4  # 0.083 in units of the cube
    for axis in range(3):  # isotropic: the same along x, y and z
        expected = np.exp(-(lag**2) / (2 * (0.12 * (n + 1)) ** 2))
        assert lag_correlation(long, lag, axis) == pytest.approx(expected, abs=0.12)
        assert lag_correlation(short, lag, axis) < 0.2


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(n=0), ValueError, "n must be >= 1"),
        (dict(n=2.5), TypeError, "n must be an integer"),
        (dict(n=4, dim=1), ValueError, "dim must be 2 or 3"),
        (dict(n=4, dim=4), ValueError, "dim must be 2 or 3"),
        (dict(n=4, correlation_length=0.0), ValueError, "correlation_length must be finite"),
        (dict(n=4, correlation_length=-0.1), ValueError, "correlation_length must be finite"),
        (dict(n=4, correlation_length=np.inf), ValueError, "correlation_length must be finite"),
        (dict(n=4, correlation_length="a"), TypeError, "correlation_length must be a real"),
        (dict(n=4, contrast=0.5), ValueError, "contrast must be >= 1"),
        (dict(n=4, contrast=np.inf), ValueError, "contrast must be finite"),
        (dict(n=4, contrast=None), TypeError, "contrast must be a real"),
    ],
)
def test_lognormal_field_rejects_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        lognormal_field(**kwargs)


# ---------------------------------------------------------------------------
# random_inclusions


def box_extent(mask):
    """Per-axis extent of the bounding box of the True cells."""
    where = np.nonzero(mask)
    return tuple(int(w.max() - w.min() + 1) for w in where)


@pytest.mark.parametrize("dim,size", [(2, (2, 5)), (3, (1, 2, 6)), (2, None), (3, None)])
def test_random_inclusions_one_box_has_the_given_size_per_axis(dim, size):
    n = 15
    want = size if size is not None else (3, 3, 8)[-dim:]  # the defaults, array axis order
    for seed in range(5):
        c = random_inclusions(n, dim=dim, count=1, size=size, contrast=50.0, background=2.0,
                              seed=seed)
        assert c.shape == (n + 1,) * dim
        high = c == 100.0
        assert np.all(high | (c == 2.0))
        assert high.sum() == np.prod(want)  # a whole box, inside the array
        assert box_extent(high) == tuple(want)


def test_random_inclusions_count_bounds_the_covered_fraction():
    n, count, size = 31, 40, (3, 3, 8)
    c = random_inclusions(n, count=count, size=size, contrast=1e6, seed=1)
    high = c == 1e6
    assert np.all(high | (c == 1.0))
    covered = high.sum()
    assert covered <= count * np.prod(size)  # overlaps only reduce it
    assert covered > 0.5 * count * np.prod(size)  # 40 sparse boxes rarely overlap much
    # every high cell belongs to a complete box of the given size: a box of 3 x 3 x 8 cells
    # fits around it within the high cells
    k, j, i = np.nonzero(high)
    for cell in zip(k[::25], j[::25], i[::25], strict=True):
        found = False
        for start in itertools.product(*(range(max(0, p - s + 1), min(p, n + 1 - s) + 1)
                                         for p, s in zip(cell, size, strict=True))):
            box = tuple(slice(a, a + s) for a, s in zip(start, size, strict=True))
            if high[box].all():
                found = True
                break
        assert found, cell


def test_random_inclusions_reach_every_cell_and_are_seeded():
    # unit boxes: many of them cover every cell of a small grid, corners included
    c = random_inclusions(3, dim=2, count=500, size=(1, 1), contrast=10.0)
    np.testing.assert_array_equal(c, np.full((4, 4), 10.0))
    # a box as large as the grid has only one place
    np.testing.assert_array_equal(random_inclusions(2, count=1, size=(3, 3, 3), contrast=3.0),
                                  np.full((3, 3, 3), 3.0))
    np.testing.assert_array_equal(random_inclusions(5, count=0), np.ones((6, 6, 6)))
    a = random_inclusions(20, dim=2, count=10, seed=7)
    np.testing.assert_array_equal(a, random_inclusions(20, dim=2, count=10, seed=7))
    assert np.any(a != random_inclusions(20, dim=2, count=10, seed=8))


def test_random_inclusions_default_size_is_clipped_to_small_grids():
    c = random_inclusions(3, dim=2, count=1, contrast=10.0)
    assert box_extent(c == 10.0) == (3, 4)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(n=0), ValueError, "n must be >= 1"),
        (dict(n=7, dim=1), ValueError, "dim must be 2 or 3"),
        (dict(n=7, count=-1), ValueError, "count must be >= 0"),
        (dict(n=7, size=(3, 3)), ValueError, "size must have dim = 3"),
        (dict(n=7, size=(3, 0, 3)), ValueError, r"size\[1\] must be >= 1"),
        (dict(n=7, size=(3, 3, 9)), ValueError, "size must be at most n"),
        (dict(n=7, size=3), TypeError, "size must be a sequence"),
        (dict(n=7, size=(3, 3, 2.5)), TypeError, r"size\[2\] must be an integer"),
        (dict(n=7, contrast=0.0), ValueError, "contrast must be finite"),
        (dict(n=7, background=-1.0), ValueError, "background must be finite"),
    ],
)
def test_random_inclusions_rejects_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        random_inclusions(**kwargs)


# ---------------------------------------------------------------------------
# stiff_inclusions and layered_coefficient (values at points)


def lattice(m, dim):
    line = (np.arange(m) + 0.5) / m
    return np.stack(np.meshgrid(*[line] * dim, indexing="ij"), axis=-1).reshape(-1, dim)


@pytest.mark.parametrize("dim", [2, 3])
def test_stiff_inclusions_one_inclusion_is_a_disk_or_ball(dim):
    x = lattice(60 if dim == 2 else 24, dim)
    r = 0.15
    volume = np.pi * r**2 if dim == 2 else 4 / 3 * np.pi * r**3
    for seed in range(4):
        c = stiff_inclusions(x, count=1, radius=r, contrast=1e4, background=3.0, seed=seed)
        assert c.shape == (x.shape[0],)
        high = c == 3e4
        assert np.all(high | (c == 3.0)) and high.any()
        pts = x[high]
        # all within one ball of radius r: no two further than 2 r apart ...
        gaps = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
        assert gaps.max() <= 2 * r + 1e-12
        # ... and every lattice point within that ball: the centre is the midpoint of the
        # high points' extent when the ball lies inside the box, at most the volume fraction
        assert high.mean() <= volume * 1.1
        centre = 0.5 * (pts.min(axis=0) + pts.max(axis=0))
        if np.all((centre > r) & (centre < 1 - r)):
            inside = np.linalg.norm(x - centre, axis=1) <= r - 2 / np.cbrt(x.shape[0])
            assert np.all(high[inside])


def test_stiff_inclusions_many_and_seeded():
    x = lattice(100, 2)
    c = stiff_inclusions(x, seed=1)  # 60 disks of radius 0.05, contrast 1e6
    fraction = np.mean(c == 1e6)
    # the Poisson-process coverage 1 - exp(-60 pi 0.05^2) = 0.38, less at the boundary
    assert 0.2 < fraction < 0.45
    np.testing.assert_array_equal(c, stiff_inclusions(x, seed=1))
    assert np.any(c != stiff_inclusions(x, seed=2))
    np.testing.assert_array_equal(stiff_inclusions(x, count=0), np.ones(x.shape[0]))


def test_stiff_inclusions_centres_fill_the_bounding_box():
    # points in [2, 4] x [10, 11]: inclusions anywhere in that box, not in the unit square
    x = lattice(50, 2) * [2.0, 1.0] + [2.0, 10.0]
    c = stiff_inclusions(x, count=400, radius=0.1, contrast=5.0)
    high = x[c == 5.0]
    assert high[:, 0].min() < 2.2 and high[:, 0].max() > 3.8
    assert high[:, 1].min() < 10.2 and high[:, 1].max() > 10.8


def test_layered_coefficient():
    # bounding box [0, 1]^2 (the two corners), slab boundaries between the lattice points
    x = np.vstack([[0.0, 0.0], [1.0, 1.0], lattice(40, 2)])
    c = layered_coefficient(x, layers=8, contrast=1e3)
    k = np.minimum(np.floor(x[:, 1] * 8).astype(int), 7)  # slab index normal to y
    np.testing.assert_array_equal(c, np.where(k % 2 == 1, 1e3, 1.0))
    c0 = layered_coefficient(x, layers=3, contrast=7.0, axis=0, background=2.0)
    k0 = np.minimum(np.floor(x[:, 0] * 3).astype(int), 2)
    np.testing.assert_array_equal(c0, np.where(k0 == 1, 14.0, 2.0))
    # the extreme points belong to the first and last slabs
    ends = layered_coefficient(np.array([[0.0], [1.0]]), layers=2, contrast=9.0, axis=0)
    np.testing.assert_array_equal(ends, [1.0, 9.0])


@pytest.mark.parametrize(
    "call,error,match",
    [
        (lambda: stiff_inclusions(np.zeros(5)), ValueError, "centroids must have shape"),
        (lambda: stiff_inclusions(np.zeros((5, 4))), ValueError, "centroids must have shape"),
        (lambda: stiff_inclusions(np.full((2, 2), np.nan)), ValueError, "centroids contain"),
        (lambda: stiff_inclusions([["a", "b"]]), TypeError, "centroids must be a real"),
        (lambda: stiff_inclusions(sp.csr_matrix(np.ones((3, 2)))), TypeError,
         "centroids must be a dense"),
        (lambda: stiff_inclusions(np.zeros((3, 2)), radius=0), ValueError, "radius must be"),
        (lambda: stiff_inclusions(np.zeros((3, 2)), count=-2), ValueError, "count must be"),
        (lambda: stiff_inclusions(np.zeros((3, 2)), contrast=-1), ValueError, "contrast must"),
        (lambda: layered_coefficient(np.zeros((3, 2)), layers=1), ValueError, "layers must be"),
        (lambda: layered_coefficient(np.zeros((3, 2)), axis=2), ValueError, "axis must be in"),
        (lambda: layered_coefficient(np.zeros((3, 2)), axis=1.0), TypeError, "axis must be an"),
    ],
)
def test_point_coefficients_reject_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_exported_from_problems():
    for name in ("coefficient_contrast", "lognormal_field", "random_inclusions",
                 "stiff_inclusions", "layered_coefficient"):
        assert name in ddops.problems.__all__
        assert callable(getattr(ddops.problems, name))
