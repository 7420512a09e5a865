"""The public read-only views added for the benchmarks: the packed-entry maps of a
decomposition and the extended width and coarse collect matrix of a Schwarz operator."""

import numpy as np
import pytest

import ddops
from ddops.dd.decomposition import Decomposition1D


def test_packed_entry_maps():
    d = ddops.Decomposition.from_matrix(ddops.problems.poisson_2d(12), 5, overlap=1)
    sub, pos = d.subdomain_of_entry, d.position_in_subdomain
    assert sub.shape == pos.shape == d.indices.shape
    for i, s in enumerate(d.subdomains):
        np.testing.assert_array_equal(s[pos[sub == i]], d.indices[sub == i])
    gather = np.zeros(d.num_subdomains * d.max_size, dtype=np.intp)
    gather[sub * d.max_size + pos] = d.indices
    np.testing.assert_array_equal(gather, d.padded_gather())
    with pytest.raises(ValueError):
        sub[0] = 1  # read-only views of the decomposition's own arrays
    assert d._subdomain_of_entry.flags.writeable  # the private arrays are unchanged


@pytest.mark.parametrize("coarse_rank", [3, None])
def test_schwarz_width_and_coarse_collect(coarse_rank):
    d = Decomposition1D(64, 4)
    kwargs = {"coarse_rank": coarse_rank} if coarse_rank else {"coarse_basis": None}
    op = ddops.SchwarzOperator(d, local_rank=2, **kwargs)
    if coarse_rank is None:
        assert op.coarse_rank == 0
        assert op.width == op.local_rank and op.coarse_collect is None
        return
    assert op.width > op.local_rank  # the coarse columns ride on the local blocks
    C = op.coarse_collect.tocoo()
    assert C.shape == (op.coarse_dim, d.num_subdomains * op.width)
    assert C.nnz > 0
    # it reads only the coarse rows (local_rank:) of every subdomain's block
    assert np.all(C.col % op.width >= op.local_rank)
    # and reaches every coarse function
    np.testing.assert_array_equal(np.unique(C.row), np.arange(op.coarse_dim))
