"""``zeros_like``, ``ones_like``, ``full_like``, ``empty_like``: creation ops shaped like
a tensor (or a ``TensorOp``, whose shape is known before it runs), on its device.

>>> z = await cuasync.zeros_like(x)                    # x's shape, dtype and device
>>> f = await cuasync.full_like(x, 7, dtype="int32")
"""

from __future__ import annotations

from typing import Any

from .._tensor import Tensor, check_shape
from .._transfers.copies import empty, zeros
from ..errors import ArgumentError
from .creation import full, ones
from .tensorop import TensorOp

__all__ = ["empty_like", "full_like", "ones_like", "zeros_like"]


def _like(x: Any, dtype: Any, shape: Any, name: str) -> tuple[Any, Any, Any]:
    if not isinstance(x, (Tensor, TensorOp)):
        raise ArgumentError(
            f"{name}: x must be a cuasync.Tensor or TensorOp, got {type(x).__name__}"
        )
    dims = x.shape if shape is None else check_shape(shape)
    return dims, x.dtype if dtype is None else dtype, x.device


def zeros_like(x: Any, dtype: Any = None, *, shape: Any = None) -> TensorOp:
    """A tensor of zeros with ``x``'s shape and dtype (or ``dtype``, ``shape``), on its device.

    >>> z = await cuasync.zeros_like(x)
    """
    dims, dt, device = _like(x, dtype, shape, "zeros_like")
    return zeros(dims, dt, device=device)


def ones_like(x: Any, dtype: Any = None, *, shape: Any = None) -> TensorOp:
    """A tensor of ones with ``x``'s shape and dtype (or ``dtype``, ``shape``), on its device.

    >>> o = await cuasync.ones_like(x, dtype="float64")
    """
    dims, dt, device = _like(x, dtype, shape, "ones_like")
    return ones(dims, dt, device=device)


def full_like(x: Any, fill_value: Any, dtype: Any = None, *, shape: Any = None) -> TensorOp:
    """A tensor of ``fill_value`` with ``x``'s shape and dtype (or ``dtype``, ``shape``).

    >>> f = await cuasync.full_like(x, 0.5)
    """
    dims, dt, device = _like(x, dtype, shape, "full_like")
    return full(dims, fill_value, dt, device=device)


def empty_like(x: Any, dtype: Any = None, *, shape: Any = None) -> TensorOp:
    """An uninitialized tensor with ``x``'s shape and dtype (or ``dtype``, ``shape``).

    >>> e = await cuasync.empty_like(x)
    """
    dims, dt, device = _like(x, dtype, shape, "empty_like")
    return empty(dims, dt, device=device)
