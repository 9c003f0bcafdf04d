"""numpy's everyday methods on :class:`~cuasync.Tensor` and ``TensorOp``: ``x.sum()``,
``x.mean()``, ``x.std()``, ``x.cumsum()``, ``x.flatten()``, ``x.tolist()``, ...

A mixin: each method is the function of the same name (``x.sum(axis=0)`` is
``cuasync.sum(x, axis=0)``), a lazy op to await; on a ``TensorOp`` it consumes the op
(an elementwise one is fused into the reduction's loads, as the function does).

>>> total = await x.sum()
>>> col = await (a * b).mean(axis=0)          # one fused kernel
>>> rows = await x.tolist()                   # nested Python lists
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .._axes import Axes, normalize_axis
from .._dtypes import DTypeLike
from ..errors import ShapeError

if TYPE_CHECKING:
    from .._core.op import DeviceOp
    from .tensorop import TensorOp

__all__ = ["ArrayMethods"]

_S = TypeVar("_S", bound="ArrayMethods")


#: The ``cuasync`` module, set by its ``__init__``: the methods call the public functions,
#: a layer above the ``Tensor`` this mixin is part of.
namespace: Any = None
#: ``scan.on_tensor``, set by :mod:`.scan` (an op of a ``TensorOp``'s output tensor).
on_tensor: Any = None


def _fn(name: str) -> Callable[..., TensorOp]:
    fn: Callable[..., TensorOp] = getattr(namespace, name)
    return fn


class ArrayMethods:
    """Reductions, scans, copies and conversions as methods (numpy's names)."""

    __slots__ = ()

    def sum(
        self, axis: Axes = None, dtype: DTypeLike = None, *, keepdims: bool = False
    ) -> TensorOp:
        """:func:`cuasync.sum` of this tensor.

        >>> s = await x.sum(axis=-1)
        """
        return _fn("sum")(self, axis, dtype=dtype, keepdims=keepdims)

    def prod(
        self, axis: Axes = None, dtype: DTypeLike = None, *, keepdims: bool = False
    ) -> TensorOp:
        """:func:`cuasync.prod` of this tensor.

        >>> p = await x.prod(axis=0)
        """
        return _fn("prod")(self, axis, dtype=dtype, keepdims=keepdims)

    def mean(
        self, axis: Axes = None, dtype: DTypeLike = None, *, keepdims: bool = False
    ) -> TensorOp:
        """:func:`cuasync.mean` of this tensor.

        >>> m = await x.mean(axis=(0, 1))
        """
        return _fn("mean")(self, axis, dtype=dtype, keepdims=keepdims)

    def max(self, axis: Axes = None, *, keepdims: bool = False) -> TensorOp:
        """:func:`cuasync.max` of this tensor.

        >>> hi = await x.max(axis=1)
        """
        return _fn("max")(self, axis, keepdims=keepdims)

    def min(self, axis: Axes = None, *, keepdims: bool = False) -> TensorOp:
        """:func:`cuasync.min` of this tensor.

        >>> lo = await x.min()
        """
        return _fn("min")(self, axis, keepdims=keepdims)

    def argmax(self, axis: int | None = None, *, keepdims: bool = False) -> TensorOp:
        """:func:`cuasync.argmax` of this tensor (int64 indices).

        >>> i = await x.argmax(axis=-1)
        """
        return _fn("argmax")(self, axis, keepdims=keepdims)

    def argmin(self, axis: int | None = None, *, keepdims: bool = False) -> TensorOp:
        """:func:`cuasync.argmin` of this tensor (int64 indices).

        >>> i = await x.argmin()
        """
        return _fn("argmin")(self, axis, keepdims=keepdims)

    def var(
        self,
        axis: Axes = None,
        ddof: float = 0,
        *,
        keepdims: bool = False,
        correction: float | None = None,
    ) -> TensorOp:
        """:func:`cuasync.var` of this tensor; ``ddof`` is numpy's name of ``correction``.

        >>> v = await x.var(axis=0, ddof=1)
        """
        c = ddof if correction is None else correction
        return _fn("var")(self, axis=axis, correction=c, keepdims=keepdims)

    def std(
        self,
        axis: Axes = None,
        ddof: float = 0,
        *,
        keepdims: bool = False,
        correction: float | None = None,
    ) -> TensorOp:
        """:func:`cuasync.std` of this tensor; ``ddof`` is numpy's name of ``correction``.

        >>> s = await x.std()
        """
        c = ddof if correction is None else correction
        return _fn("std")(self, axis=axis, correction=c, keepdims=keepdims)

    def all(self, axis: Axes = None, *, keepdims: bool = False) -> TensorOp:
        """:func:`cuasync.all` of this tensor: whether every element is nonzero.

        >>> ok = await (x > 0).all()
        """
        return _fn("all")(self, axis=axis, keepdims=keepdims)

    def any(self, axis: Axes = None, *, keepdims: bool = False) -> TensorOp:
        """:func:`cuasync.any` of this tensor: whether some element is nonzero.

        >>> hit = await (x > 3).any(axis=0)
        """
        return _fn("any")(self, axis=axis, keepdims=keepdims)

    def cumsum(self, axis: int | None = None, dtype: DTypeLike = None) -> TensorOp:
        """:func:`cuasync.cumsum` of this tensor (None: flattened, numpy's).

        >>> c = await x.cumsum(axis=1)
        """
        return _fn("cumsum")(self, axis, dtype)

    def cumprod(self, axis: int | None = None, dtype: DTypeLike = None) -> TensorOp:
        """:func:`cuasync.cumprod` of this tensor (None: flattened, numpy's).

        >>> p = await x.cumprod(axis=0)
        """
        return _fn("cumprod")(self, axis, dtype)

    def copy(self) -> TensorOp:
        """A contiguous copy on the same device (numpy's ``copy``; :func:`cuasync.dup`).

        >>> y = await x.copy()
        """
        if isinstance(self, namespace.Tensor):
            return self.dup()
        op: Any = self
        return on_tensor(op, "copy", op.shape, op.dtype, lambda t: t.dup())

    def flatten(self) -> TensorOp:
        """A 1-d copy, in C order (numpy's ``flatten``).

        >>> v = await x.flatten()          # x.size elements
        """
        return self.copy().reshape((-1,))

    def ravel(self) -> TensorOp:
        """The elements in one dimension, in C order (numpy's ``ravel``); an op, and a
        copy (``x.reshape(-1)`` is the zero-copy view of a contiguous tensor).

        >>> v = await x.ravel()
        """
        return self.flatten()

    def squeeze(self: _S, axis: Axes = None) -> _S:
        """:func:`cuasync.squeeze`: without length-1 axes (all, or those of ``axis``); a
        tensor gives a view, a ``TensorOp`` an op whose output is reshaped.

        >>> y = x.squeeze()               # x: (1, 3, 1) -> (3,)
        """
        if isinstance(self, namespace.Tensor):
            return namespace.squeeze(self, axis)  # type: ignore[no-any-return, unused-ignore]
        op: Any = self
        return op.reshape(_squeezed(op.shape, axis))

    def tolist(self) -> DeviceOp[Any]:
        """An op copying the tensor to the host as nested Python lists (a Python scalar
        for a 0-d tensor), as numpy's ``tolist``.

        >>> rows = await x.tolist()
        """
        op: Any = self
        if isinstance(op, namespace.Tensor):
            return op.to_host().map(lambda a: a.tolist())
        return op.then(lambda t: t.tolist())


def _squeezed(shape: tuple[int, ...], axis: Any) -> tuple[int, ...]:
    """The shape :func:`cuasync.squeeze` gives a tensor of ``shape``."""
    if axis is None:
        return tuple(d for d in shape if d != 1)
    items = axis if isinstance(axis, tuple) else (axis,)
    drop = {normalize_axis(a, len(shape), "squeeze") for a in items}
    for j in drop:
        if shape[j] != 1:
            raise ShapeError(f"squeeze: axis {j} has length {shape[j]}, not 1")
    return tuple(d for j, d in enumerate(shape) if j not in drop)
