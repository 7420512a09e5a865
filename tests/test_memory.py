"""Sizes whose arrays cannot fit in memory are refused up front, with the estimate.

The refusals must come before any large allocation.  The estimates are
checked against an independent count: the peak traced by :mod:`tracemalloc`
while building the object (numpy reports its buffers there).
"""

import re
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

import ddops._validation as validation
from ddops import (
    Decomposition,
    Decomposition1D,
    GlobalLowRankOperator,
    SchwarzOperator,
    TwoLevelSchwarz,
    coarse_basis,
    poisson_1d,
)
from ddops._validation import check_memory, format_bytes, memory_limit_bytes

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}


def stated_bytes(message):
    """The estimate a refusal states, in bytes."""
    value, unit = re.search(r"would need about ([\d.]+) (\w+) of memory", message).groups()
    return float(value) * UNITS[unit]


def traced_peak(build):
    tracemalloc.start()
    try:
        result = build()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


@pytest.fixture
def limit(monkeypatch):
    """Set the memory limit the checks compare against."""
    def set_limit(nbytes):
        monkeypatch.setattr(validation, "memory_limit_bytes", lambda: nbytes)
    return set_limit


def test_memory_limit_is_the_machine_memory_or_less():
    value = memory_limit_bytes()
    if value is None:  # pragma: no cover - only where no POSIX sysconf exists
        pytest.skip("no way to read the memory size here")
    import os

    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert isinstance(value, int) and 0 < value <= physical


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(3 * 2**30) == "3.00 GiB"
    assert format_bytes(2**70) == f"{2**20:.2f} PiB"


def test_check_memory_boundary(limit):
    limit(1000)
    check_memory("this", 1000)
    with pytest.raises(ValueError, match="this would need about 1001 B of memory, more than "
                                         "the 1000 B this machine has; reduce it"):
        check_memory("this", 1001, "reduce it")
    limit(None)  # unknown limit: nothing refused
    check_memory("this", 10**30)


@pytest.mark.parametrize("kind", ["element", "dof"])
def test_huge_decomposition1d_is_refused_before_allocating(kind):
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"Decomposition1D\(n=1000000000000, subdomains=8, "
                                             r"overlap=2\) would need about [\d.]+ TiB") as err:
            Decomposition1D(10**12, 8, kind=kind)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20  # nothing sized by n was allocated
    # at least the packed indices themselves: 10^12 int64
    assert stated_bytes(str(err.value)) >= 8 * 10**12
    assert "reduce n" in str(err.value)


@pytest.mark.parametrize("args", [(400_000, 8, 2, "element"), (300_000, 3000, 3, "dof"),
                                  (200_000, 50_000, 1, "element")])
def test_decomposition1d_estimate_bounds_the_traced_peak(args, limit):
    _, peak = traced_peak(lambda: Decomposition1D(*args))
    limit(peak - 1)  # below the true peak: the estimate must be at least the peak
    with pytest.raises(ValueError, match=r"Decomposition1D\(n=") as err:
        Decomposition1D(*args)
    assert peak <= stated_bytes(str(err.value)) * 1.01  # the message rounds to 3 digits
    limit(2 * peak)  # and not far above it
    Decomposition1D(*args)


def test_decomposition1d_of_the_issue_on_a_small_machine(limit):
    limit(16 * 2**30)
    with pytest.raises(ValueError, match=r"Decomposition1D\(n=1000000000, subdomains=8, "
                                         r"overlap=2\) would need about [\d.]+ GiB of memory, "
                                         r"more than the 16.00 GiB this machine has"):
        Decomposition1D(10**9, 8)


def test_general_decomposition(limit):
    n = 200_000
    subs = [np.arange(0, n // 2 + 10), np.arange(n // 2 - 10, n)]
    _, peak = traced_peak(lambda: Decomposition(subs, n))
    limit(peak - 1)
    with pytest.raises(ValueError, match=r"Decomposition of 200000 unknowns into 2 subdomains "
                                         r"\(200020 indices\) would need about") as err:
        Decomposition(subs, n)
    assert peak <= stated_bytes(str(err.value)) * 1.01
    limit(2 * peak)
    Decomposition(subs, n)


def test_general_decomposition_with_huge_num_dofs_is_refused_cheaply():
    """Too few indices to cover the unknowns: refused without a num_dofs-sized count."""
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"subdomains do not cover every unknown "
                                             r"\(index 2 is missing\)"):
            Decomposition([[0, 1], [1, 3]], 10**12)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20


def _schwarz_cases():
    return [
        (Decomposition1D(100_000, 8), dict(local_rank=4)),
        (Decomposition1D(40_000, 2000), dict(local_rank=2)),  # n0 = 1999: O(n0^2) coarse
        (Decomposition1D(50_000, 50), dict(local_rank=3, tied=True, dtype=np.float32)),
        (Decomposition1D(50_000, 50), dict(local_rank=3, coarse_basis=None)),
    ]


@pytest.mark.parametrize("d,kwargs", _schwarz_cases())
def test_schwarz_estimate_bounds_the_parameters_and_the_peak(d, kwargs, limit):
    op, peak = traced_peak(lambda: SchwarzOperator(d, **kwargs))
    limit(op.theta.nbytes - 1)  # the parameters alone do not fit: refused before allocating
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"SchwarzOperator\(local_rank=\d+, coarse_rank=\d+"
                                             r"\) on \d+ subdomains .* would need about") as err:
            SchwarzOperator(d, **kwargs)
        _, refused_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # refusing costs no more than building the coarse basis: no parameter was allocated
    basis = kwargs.get("coarse_basis", "interface_hats")
    basis_peak = 0 if basis is None else traced_peak(lambda: coarse_basis(d, basis))[1]
    assert refused_peak <= basis_peak + 2**20
    assert stated_bytes(str(err.value)) * 1.01 >= op.theta.nbytes
    limit(2 * peak)
    SchwarzOperator(d, **kwargs)


def test_schwarz_with_a_huge_default_coarse_rank_is_refused(limit):
    limit(16 * 2**30)
    d = Decomposition1D(200_000, 40_000, overlap=1)  # coarse_rank = n0 = 39999 by default
    with pytest.raises(ValueError, match=r"coarse_rank=39999\) .* would need about [\d.]+ GiB"
                                         r".*reduce local_rank or coarse_rank") as err:
        SchwarzOperator(d)
    # the two coarse factors alone: 2 n0^2 float64
    assert stated_bytes(str(err.value)) >= 2 * 39999**2 * 8
    SchwarzOperator(d, coarse_rank=8)  # a small coarse rank fits


def test_dense_coarse_blocks_are_checked(limit):
    d = Decomposition1D(20_000, 4)
    Phi = np.random.default_rng(0).standard_normal((d.num_dofs, 400))  # every block: 400 columns
    blocks = 8 * d.num_subdomains * d.max_size * 400
    limit(blocks - 1)  # the parameters fit, the dense coarse blocks do not
    with pytest.raises(ValueError, match=r"the coarse blocks of Phi \(400 columns, up to 400 per "
                                         r"subdomain.* would need about"):
        SchwarzOperator(d, coarse_basis=Phi, coarse_rank=1, local_rank=1)
    limit(None)
    SchwarzOperator(d, coarse_basis=sp.csr_matrix(Phi[:, :3]), local_rank=1)


def test_global_operator(limit):
    with pytest.raises(ValueError, match=r"GlobalLowRankOperator\(num_dofs=10000000, "
                                         r"rank=1000000\) would need about [\d.]+ TiB"):
        GlobalLowRankOperator(10**7, 10**6)
    op, peak = traced_peak(lambda: GlobalLowRankOperator(100_000, 20))
    limit(op.theta.nbytes - 1)
    with pytest.raises(ValueError, match="reduce rank"):
        GlobalLowRankOperator(100_000, 20)
    limit(2 * peak)
    GlobalLowRankOperator(100_000, 20)


def test_two_level_dense_local_solver(limit):
    n = 4000
    A, d = poisson_1d(n), Decomposition1D(n, 2)
    padded = 8 * d.num_subdomains * d.max_size**2
    limit(2 * padded)  # one copy fits, the set-up (about four) does not
    with pytest.raises(ValueError, match=r"TwoLevelSchwarz\(local_solver='dense'\) on 2 "
                                         r"subdomains .*use local_solver='sparse'"):
        TwoLevelSchwarz(A, d, local_solver="dense")
    assert TwoLevelSchwarz(A, d).local_solver == "sparse"  # auto never picks what is refused


def test_training_buffers_are_checked(limit):
    d = Decomposition1D(2000, 8)
    op = SchwarzOperator(d, local_rank=4)
    F = np.random.default_rng(0).standard_normal((d.num_dofs, 64))
    limit(F.nbytes)  # the buffers are several times the batch
    with pytest.raises(ValueError, match="the training buffers for a batch of 64 columns would "
                                         "need about .*use a smaller batch"):
        op.value_and_grad_flat(F, F)
    limit(None)
    value, grad = op.value_and_grad_flat(F, F)
    assert np.isfinite(float(value)) and grad.shape == op.theta.shape
