"""Small argument checks shared by the whole package (clear messages, named arguments)."""

from __future__ import annotations

import numbers
import os
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


# Where the kernel states the memory limit of this process's control group (v2, then v1).
_CGROUP_LIMIT_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def memory_limit_bytes() -> int | None:
    """Most memory this process can have: physical memory, or a smaller cgroup limit.

    Returns None where neither can be read (then :func:`check_memory` refuses
    nothing).
    """
    limits = []
    try:
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):  # not a POSIX system
        pass
    for path in _CGROUP_LIMIT_FILES:
        try:
            with open(path) as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text.isdigit():  # "max" means no limit
            limits.append(int(text))
    limits = [v for v in limits if v > 0]
    return min(limits) if limits else None


def format_bytes(nbytes: float) -> str:
    """``nbytes`` in binary units, e.g. ``"1.50 GiB"``."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{value:.0f} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def fits_in_memory(nbytes: float) -> bool:
    """Whether ``nbytes`` is at most :func:`memory_limit_bytes` (True when that is unknown)."""
    limit = memory_limit_bytes()
    return limit is None or nbytes <= limit


def check_memory(what: str, nbytes: float, hint: str = "") -> None:
    """Refuse, before allocating, arrays that cannot fit in this machine's memory.

    Parameters
    ----------
    what : str
        The object being built, with the arguments that set its size (for the message).
    nbytes : float
        Estimated peak memory of building it.
    hint : str
        What to reduce, appended to the message.

    Raises
    ------
    ValueError
        If ``nbytes`` exceeds :func:`memory_limit_bytes`.
    """
    limit = memory_limit_bytes()
    if limit is not None and nbytes > limit:
        raise ValueError(f"{what} would need about {format_bytes(nbytes)} of memory, more than "
                         f"the {format_bytes(limit)} this machine has{'; ' + hint if hint else ''}")


def _xp(x: Any):
    from .backend import get_array_module

    return get_array_module(x)
