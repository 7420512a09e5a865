"""Small argument checks shared by the whole package (clear messages, named arguments)."""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def check_int(name: str, value: Any, minimum: int | None = None) -> int:
    """Return ``value`` as an int, or raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_positive_float(name: str, value: Any, allow_zero: bool = False) -> float:
    """Return ``value`` as a finite float > 0 (or >= 0), or raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value}")
    return value


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """Raise a ValueError naming ``name`` unless ``value`` is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def check_dtype(dtype: Any, name: str = "dtype") -> np.dtype:
    """Return a float32/float64 numpy dtype, or raise naming ``name``."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"{name} must be float32 or float64, got {dtype!r}") from exc
    if dt not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32 or float64, got {dt}")
    return dt


def check_finite(name: str, x: Any) -> None:
    """Raise a ValueError naming ``name`` if ``x`` holds NaN or inf."""
    xp = _xp(x)
    if not bool(xp.all(xp.isfinite(x))):
        raise ValueError(f"{name} contains NaN or inf")


def _xp(x: Any):
    from .backend import get_array_module

    return get_array_module(x)
