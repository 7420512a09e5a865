"""Operators: the linear-operator base, losses, the trainable low-rank operator, Schwarz
attention and the global low-rank baseline."""

from .global_lowrank import GlobalLowRankOperator
from .linop import DENSE_LIMIT_BYTES, BackendLinearOperator
from .lowrank import INITS, LowRankOperator, init_scale
from .schwarz import PARTITIONS, SchwarzOperator

__all__ = ["DENSE_LIMIT_BYTES", "INITS", "PARTITIONS", "BackendLinearOperator",
           "GlobalLowRankOperator", "LowRankOperator", "SchwarzOperator", "init_scale"]
