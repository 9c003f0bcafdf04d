"""Zero-copy structural views: permute_dims, broadcast_to, expand_dims, squeeze, diagonal,
flip.

Each returns a :class:`~cuasync.Tensor` sharing the input's allocation (strides change,
no data moves), with numpy's rules and errors raised at once (``ArgumentError`` naming
the argument). Of a :class:`~cuasync.TensorOp`, each is a TensorOp whose output is
that view of the op's output (checked when built; nothing more runs). Broadcast views
have stride 0 along the broadcast axes: read them freely; an op refuses one as its
``out=`` (its elements alias). An empty view keeps its base's offset, inside the allocation.

>>> cuasync.permute_dims(t, (1, 0)).shape, cuasync.expand_dims(t, 0).shape
((4, 3), (1, 3, 4))
>>> cuasync.diagonal(m).strides                      # m: a contiguous (4, 4) tensor
(5,)
>>> r = await cuasync.flip(cuasync.exp(t), 0)        # the view of exp's output
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._axes import Axes, normalize_axis
from .._tensor import Shape, Tensor, check_shape, derived_view
from .._tensor import methods as tensor_methods
from ..errors import ArgumentError, ShapeError
from .on_output import X, frozen, viewing

__all__ = ["broadcast_to", "diagonal", "expand_dims", "flip", "permute_dims", "squeeze"]


def _tensor(x: Any, name: str, takes: str = "a cuasync.Tensor (await an op first)") -> Tensor:
    """``x`` where it is a tensor (the functions whose result is views of it, or whose
    shape depends on its data, take no TensorOp), else an ArgumentError saying what the
    function ``takes``."""
    if not isinstance(x, Tensor):
        raise ArgumentError(f"{name}: x must be {takes}, got {type(x).__name__}")
    return x


#: (views' name for :func:`cuasync._axes.normalize_axis`)
_axis = normalize_axis


def permute(x: Tensor, axes: Any, name: str = "permute_dims") -> Tensor:
    """``x`` with its axes in the order ``axes`` (a permutation of ``range(x.ndim)``)."""
    axes = tuple(axes)
    norm = [_axis(a, x.ndim, name, "axes") for a in axes]
    if sorted(norm) != list(range(x.ndim)):
        raise ArgumentError(f"{name}: axes={axes} is not a permutation of the {x.ndim} axes")
    return Tensor(
        x.allocation,
        tuple(x.shape[a] for a in norm),
        x.dtype,
        tuple(x.strides[a] for a in norm),
        x.offset,
    )


def permute_dims(x: X, axes: Sequence[int]) -> X:
    """The axes of ``x`` permuted (the array API's name for ``transpose``), zero-copy.

    >>> cuasync.permute_dims(t, (2, 0, 1)).shape     # t: (2, 3, 4)
    (4, 2, 3)
    """
    order = frozen(axes)
    return viewing(x, "permute_dims", lambda t: permute(t, order))


def broadcast_to(x: X, shape: int | Sequence[int]) -> X:
    """A read-only-in-spirit view of ``x`` broadcast to ``shape`` (stride 0 where repeated).

    >>> cuasync.broadcast_to(row, (3, 4)).strides    # row: (4,)
    (0, 1)
    """
    new = frozen(shape)
    return viewing(x, "broadcast_to", lambda t: _broadcast_to(t, new))


def _broadcast_to(x: Tensor, shape: int | Sequence[int]) -> Tensor:
    new = check_shape(shape)
    lead = len(new) - x.ndim
    if lead < 0:
        raise ShapeError(f"broadcast_to: shape={new} has fewer dimensions than x {x.shape}")
    strides = [0] * lead
    for d, s, n in zip(x.shape, x.strides, new[lead:], strict=True):
        if d != n and d != 1:
            raise ShapeError(f"broadcast_to: x of shape {x.shape} cannot be broadcast to {new}")
        strides.append(s if d == n else 0)
    return Tensor(x.allocation, new, x.dtype, tuple(strides), x.offset)


def expand_dims(x: X, axis: int | tuple[int, ...]) -> X:
    """``x`` with new length-1 axes at ``axis`` (an int or tuple, positions in the result).

    >>> cuasync.expand_dims(t, (0, -1)).shape        # t: (3, 4)
    (1, 3, 4, 1)
    """
    return viewing(x, "expand_dims", lambda t: _expand_dims(t, axis))


def _expand_dims(x: Tensor, axis: int | tuple[int, ...]) -> Tensor:
    items = axis if isinstance(axis, tuple) else (axis,)
    ndim = x.ndim + len(items)
    where = [_axis(a, ndim, "expand_dims") for a in items]
    if len(set(where)) != len(where):
        raise ArgumentError(f"expand_dims: axis={axis!r} repeats an axis")
    dims, strides = iter(x.shape), iter(x.strides)
    shape: list[int] = []
    out_strides: list[int] = []
    for j in range(ndim):
        if j in where:
            shape.append(1)
            out_strides.append(0)
        else:
            shape.append(next(dims))
            out_strides.append(next(strides))
    return Tensor(x.allocation, tuple(shape), x.dtype, tuple(out_strides), x.offset)


def squeeze(x: X, axis: Axes = None) -> X:
    """``x`` without length-1 axes (all of them, or those of ``axis``, which must be 1).

    >>> cuasync.squeeze(t).shape                     # t: (1, 3, 1)
    (3,)
    """
    return viewing(x, "squeeze", lambda t: _squeeze(t, axis))


def _squeeze(x: Tensor, axis: Axes = None) -> Tensor:
    if axis is None:
        drop = {j for j, d in enumerate(x.shape) if d == 1}
    else:
        items = axis if isinstance(axis, tuple) else (axis,)
        drop = {_axis(a, x.ndim, "squeeze") for a in items}
        for j in drop:
            if x.shape[j] != 1:
                raise ShapeError(f"squeeze: axis {j} has length {x.shape[j]}, not 1")
    keep = [j for j in range(x.ndim) if j not in drop]
    shape: Shape = tuple(x.shape[j] for j in keep)
    return Tensor(x.allocation, shape, x.dtype, tuple(x.strides[j] for j in keep), x.offset)


def diagonal(x: X, offset: int = 0, axis1: int = 0, axis2: int = 1) -> X:
    """The diagonal of ``x`` over ``axis1`` and ``axis2`` as a zero-copy view; the
    diagonal becomes the last axis (numpy's ``diagonal``, which is a read-only view).

    >>> cuasync.diagonal(m, offset=1).shape          # m: (4, 5)
    (4,)
    """
    return viewing(x, "diagonal", lambda t: _diagonal(t, offset, axis1, axis2))


def _diagonal(x: Tensor, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    if x.ndim < 2:
        raise ShapeError(f"diagonal: x must have at least 2 dimensions, got shape {x.shape}")
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
        raise ArgumentError(f"diagonal: offset must be an int, got {offset!r}"[:200])
    a1, a2 = _axis(axis1, x.ndim, "diagonal", "axis1"), _axis(axis2, x.ndim, "diagonal", "axis2")
    if a1 == a2:
        raise ArgumentError(f"diagonal: axis1 and axis2 are the same axis ({a1})")
    offset = int(offset)
    n1, n2 = x.shape[a1], x.shape[a2]
    start = x.offset
    if offset >= 0:
        n = max(0, min(n1, n2 - offset))
        start += offset * x.strides[a2]
    else:
        n = max(0, min(n1 + offset, n2))
        start += -offset * x.strides[a1]
    keep = [j for j in range(x.ndim) if j not in (a1, a2)]
    shape = (*(x.shape[j] for j in keep), n)
    strides = (*(x.strides[j] for j in keep), x.strides[a1] + x.strides[a2])
    return derived_view(x, shape, strides, start)


def flip(x: X, axis: Axes = None) -> X:
    """``x`` reversed along ``axis`` (an int, a tuple, or None for every axis), zero-copy
    (numpy's ``flip`` is a view too).

    >>> cuasync.flip(t, 0).strides                   # t: contiguous (3, 4)
    (-4, 1)
    """
    return viewing(x, "flip", lambda t: _flip(t, axis))


def _flip(x: Tensor, axis: Axes = None) -> Tensor:
    if axis is None:
        axes = set(range(x.ndim))
    else:
        items = axis if isinstance(axis, tuple) else (axis,)
        axes = {_axis(a, x.ndim, "flip") for a in items}
    offset = x.offset
    strides = list(x.strides)
    for j in axes:
        offset += (x.shape[j] - 1) * strides[j]
        strides[j] = -strides[j]
    return derived_view(x, x.shape, tuple(strides), offset)


# Tensor.transpose and Tensor.T (the tensor module sits below the ops).
tensor_methods.permute = permute
