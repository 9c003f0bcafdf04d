"""Products in the main namespace: the array API standard's ``vecdot``; numpy's ``dot``,
``inner`` and ``outer`` (on :func:`cuasync.tensordot` and the elementwise kernels).

>>> d = await cuasync.vecdot(a, b)              # sum(conj(a) * b, axis=-1), fused
>>> m = await cuasync.dot(x, y)                 # numpy's dot
>>> o = await cuasync.outer(u, v)               # u[:, None] * v[None, :]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._tensor import Tensor
from .._views import expand_dims
from ..errors import ArgumentError, ShapeError
from . import elementwise
from .contract import tensordot
from .reductions import reduce_op
from .tensorop import TensorOp

__all__ = ["dot", "inner", "outer", "vecdot"]


def _shape(x: Any, argument: str, name: str) -> tuple[int, ...]:
    if isinstance(x, (Tensor, TensorOp)):
        return x.shape
    if isinstance(x, np.ndarray):
        raise ArgumentError(
            f"{name}: {argument} is a numpy array; upload it first: await cuasync.from_host(array)"
        )
    raise ArgumentError(
        f"{name}: {argument} must be a cuasync.Tensor or TensorOp, got {type(x).__name__}"
    )


def vecdot(x1: Tensor | TensorOp, x2: Tensor | TensorOp, /, *, axis: int = -1) -> TensorOp:
    """The dot product of vectors along ``axis`` (the other axes broadcast):
    ``sum(conj(x1) * x2, axis)``, in the promoted dtype of ``x1`` and ``x2``, one fused
    kernel, as the array API standard's.

    >>> d = await cuasync.vecdot(a, b)             # (.., n) . (.., n) -> (..)
    """
    s1, s2 = _shape(x1, "x1", "vecdot"), _shape(x2, "x2", "vecdot")
    if not s1 or not s2:
        raise ShapeError(f"vecdot: x1 (shape {s1}) and x2 (shape {s2}) must have an axis each")
    ndim = max(len(s1), len(s2))
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise ArgumentError(f"vecdot: axis must be an int, got {axis!r}"[:200])
    if not -min(len(s1), len(s2)) <= axis < 0 and not 0 <= axis < ndim:
        from ..errors import IndexOutOfRangeError

        raise IndexOutOfRangeError(f"vecdot: axis {axis} is out of range for shapes {s1} and {s2}")
    a = int(axis) - ndim if axis >= 0 else int(axis)
    if s1[a] != s2[a]:
        raise ShapeError(f"vecdot: x1 (shape {s1}) and x2 (shape {s2}) differ along axis {axis}")
    left = elementwise.conj(x1) if x1.dtype.kind == "c" else x1
    product = elementwise.multiply(left, x2)
    return reduce_op("vecdot", "sum", product, a % ndim, dtype=product.dtype)


def _scalar_product(a: Any, b: Any) -> TensorOp | None:
    """``a * b`` where either is 0-d (numpy's dot and inner), else None."""
    if a.ndim == 0 or b.ndim == 0:
        return elementwise.multiply(a, b)
    return None


def dot(a: Tensor | TensorOp, b: Tensor | TensorOp) -> TensorOp:
    """numpy's ``dot``: 0-d operands multiply; otherwise the last axis of ``a`` is
    contracted with the second-to-last of ``b`` (its only one for a 1-d ``b``).

    >>> m = await cuasync.dot(x, y)                # (m, k) . (k, n) -> (m, n)
    >>> s = await cuasync.dot(u, v)                # 1-d . 1-d -> 0-d
    """
    _shape(a, "a", "dot"), _shape(b, "b", "dot")
    scalar = _scalar_product(a, b)
    if scalar is not None:
        return scalar
    return tensordot(a, b, axes=([a.ndim - 1], [max(b.ndim - 2, 0)]))


def inner(a: Tensor | TensorOp, b: Tensor | TensorOp) -> TensorOp:
    """numpy's ``inner``: the last axes of ``a`` and ``b`` contracted (0-d: multiply).

    >>> g = await cuasync.inner(x, y)              # (m, k), (n, k) -> (m, n)
    """
    _shape(a, "a", "inner"), _shape(b, "b", "inner")
    scalar = _scalar_product(a, b)
    if scalar is not None:
        return scalar
    return tensordot(a, b, axes=([a.ndim - 1], [b.ndim - 1]))


def outer(a: Tensor, b: Tensor) -> TensorOp:
    """numpy's ``outer``: ``a`` and ``b`` flattened, ``a[:, None] * b[None, :]`` (each
    product rounded once, as numpy's).

    >>> o = await cuasync.outer(u, v)              # (m,), (n,) -> (m, n)
    """
    flat = []
    for v, arg in ((a, "a"), (b, "b")):
        _shape(v, arg, "outer")
        if not isinstance(v, Tensor):
            raise ArgumentError(f"outer: {arg} must be a cuasync.Tensor (await the op first)")
        if v.ndim != 1 and not v.is_contiguous:
            raise ShapeError(
                f"outer: {arg} (shape {v.shape}) is a non-contiguous view, which cannot be "
                "flattened zero-copy; copy it first with .dup()"
            )
        flat.append(v if v.ndim == 1 else v.reshape((-1,)))
    return elementwise.multiply(expand_dims(flat[0], 1), expand_dims(flat[1], 0))
