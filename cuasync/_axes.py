"""Axis arguments, checked and normalized: the one owner of what an ``axis`` may be.

>>> normalize_axis(-1, 3, "squeeze")
2
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import ArgumentError, IndexOutOfRangeError

__all__ = ["Axes", "normalize_axis"]

#: What a reduction's ``axis`` may be: None (every axis), an int or a tuple of ints.
Axes = int | tuple[int, ...] | None


def normalize_axis(a: Any, ndim: int, name: str, argument: str = "axis") -> int:
    """``a`` as an axis in ``0..ndim-1``; ``ArgumentError`` for a non-int, and
    ``IndexOutOfRangeError`` (an ``IndexError``, as the array API requires) out of range."""
    if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
        raise ArgumentError(f"{name}: {argument} must be an int, got {a!r}"[:200])
    if not -ndim <= a < ndim:
        raise IndexOutOfRangeError(
            f"{name}: {argument} {a} is out of range for {ndim} dimensions (-{ndim}..{ndim - 1})"
            if ndim
            else f"{name}: {argument} {a}: there are no axes"
        )
    return int(a) % ndim
