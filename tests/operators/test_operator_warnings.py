"""The truncation warnings of the operators point at the caller's line, also when the
operator is built inside ddops (a fixed ``stacklevel=2`` pointed at the ddops frame)."""

from __future__ import annotations

import os
import warnings

import ddops
from ddops import GlobalLowRankOperator, SchwarzOperator
from ddops.precond.learned import learned_schwarz_preconditioner


def _caught(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [w for w in caught if "truncated" in str(w.message)]


def _through_ddops(cls, *args, **kwargs):
    """A call that builds ``cls(*args, **kwargs)`` from a frame whose code lives in the
    ddops package, as a builder of the library would."""
    where = os.path.join(os.path.dirname(ddops.__file__), "_a_builder_of_the_library.py")
    scope = {}
    exec(compile("def build(cls, args, kwargs):\n    return cls(*args, **kwargs)\n", where,
                 "exec"), scope)
    return lambda: scope["build"](cls, args, kwargs)


def test_schwarz_operator_truncation_warnings_point_at_the_caller():
    d = ddops.Decomposition1D(32, 4, overlap=1)
    A = ddops.poisson_1d(32)
    calls = {
        "local_rank, direct": lambda: SchwarzOperator(d, local_rank=d.max_size + 3),
        "coarse_rank, direct": lambda: SchwarzOperator(d, 2, coarse_rank=99,
                                                       coarse_basis="pou"),
        "local_rank, via learned_schwarz_preconditioner":
            lambda: learned_schwarz_preconditioner(A, d, local_rank=d.max_size + 3),
        "coarse_rank, through ddops": _through_ddops(SchwarzOperator, d, 2, coarse_rank=99,
                                                     coarse_basis="pou"),
    }
    for label, call in calls.items():
        caught = _caught(call)
        assert caught, label
        assert {w.filename for w in caught} == {__file__}, (label, caught[0].filename)


def test_global_lowrank_truncation_warning_points_at_the_caller():
    for label, call in {
        "direct": lambda: GlobalLowRankOperator(5, 8),
        "through ddops": _through_ddops(GlobalLowRankOperator, 5, 8),
    }.items():
        caught = _caught(call)
        assert len(caught) == 1, label
        assert caught[0].filename == __file__, (label, caught[0].filename)
