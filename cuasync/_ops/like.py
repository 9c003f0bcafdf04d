"""``zeros_like``, ``ones_like``, ``full_like``, ``empty_like``: creation ops shaped like
a tensor (or a ``TensorOp``, whose shape is known before it runs), on its device (or
``device``), the array API's ``*_like(x, /, *, dtype=None, device=None)``.

>>> z = await cuasync.zeros_like(x)                    # x's shape, dtype and device
>>> f = await cuasync.full_like(x, 7, dtype="int32", device=1)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core.device import Device
from .._dtypes import DTypeLike
from .._tensor import Shape, Tensor, check_shape
from .._transfers.copies import empty, zeros
from ..errors import ArgumentError
from .creation import full, ones
from .tensorop import ShapeLike, TensorOp

__all__ = ["empty_like", "full_like", "ones_like", "zeros_like"]


def _like(
    x: Any, dtype: DTypeLike, shape: ShapeLike | None, device: int | Device | None, name: str
) -> tuple[Shape, Any, int | Device | None]:
    if not isinstance(x, (Tensor, TensorOp)):
        raise ArgumentError(
            f"{name}: x must be a cuasync.Tensor or TensorOp, got {type(x).__name__}"
        )
    dims = x.shape if shape is None else check_shape(shape)
    return dims, x.dtype if dtype is None else dtype, x.device if device is None else device


def zeros_like(
    x: Tensor | TensorOp,
    /,
    dtype: DTypeLike = None,
    *,
    device: int | Device | None = None,
    shape: ShapeLike | None = None,
) -> TensorOp:
    """A tensor of zeros with ``x``'s shape and dtype (or ``dtype``, ``shape``), on its
    device (or ``device``).

    >>> z = await cuasync.zeros_like(x)
    """
    dims, dt, where = _like(x, dtype, shape, device, "zeros_like")
    return zeros(dims, dt, device=where)


def ones_like(
    x: Tensor | TensorOp,
    /,
    dtype: DTypeLike = None,
    *,
    device: int | Device | None = None,
    shape: ShapeLike | None = None,
) -> TensorOp:
    """A tensor of ones with ``x``'s shape and dtype (or ``dtype``, ``shape``), on its device.

    >>> o = await cuasync.ones_like(x, dtype="float64")
    """
    dims, dt, where = _like(x, dtype, shape, device, "ones_like")
    return ones(dims, dt, device=where)


def full_like(
    x: Tensor | TensorOp,
    /,
    fill_value: complex | np.number[Any] | np.bool_,
    dtype: DTypeLike = None,
    *,
    device: int | Device | None = None,
    shape: ShapeLike | None = None,
) -> TensorOp:
    """A tensor of ``fill_value`` with ``x``'s shape and dtype (or ``dtype``, ``shape``).

    >>> f = await cuasync.full_like(x, 0.5)
    """
    dims, dt, where = _like(x, dtype, shape, device, "full_like")
    return full(dims, fill_value, dt, device=where)


def empty_like(
    x: Tensor | TensorOp,
    /,
    dtype: DTypeLike = None,
    *,
    device: int | Device | None = None,
    shape: ShapeLike | None = None,
) -> TensorOp:
    """An uninitialized tensor with ``x``'s shape and dtype (or ``dtype``, ``shape``).

    >>> e = await cuasync.empty_like(x)
    """
    dims, dt, where = _like(x, dtype, shape, device, "empty_like")
    return empty(dims, dt, device=where)
