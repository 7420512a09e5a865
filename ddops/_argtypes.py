"""argparse value types shared by the ``ddops`` subcommands (one-line error messages)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def int_at_least(minimum: int | None) -> Callable[[str], int]:
    """An argparse type: an integer ``>= minimum`` (any integer for None)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def _finite_float(text: str, zero: bool) -> float:
    """A finite number ``> 0`` (``>= 0`` with ``zero``), or argparse's one-line error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not ((0 <= value if zero else 0 < value) and value < math.inf):
        raise argparse.ArgumentTypeError(
            f"expected a finite {'number >= 0' if zero else 'positive number'}, got {text}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number ``> 0``."""
    return _finite_float(text, zero=False)


def nonnegative_float(text: str) -> float:
    """An argparse type: a finite number ``>= 0``."""
    return _finite_float(text, zero=True)
