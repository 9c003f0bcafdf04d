"""Copying tensor ops: ``concatenate``, ``stack``, ``take`` (a gather kernel), ``tril``
and ``triu``.

Each returns a :class:`~cuasync.TensorOp` whose shape and dtype are known when it is
built; bad arguments raise then (``ArgumentError`` naming the argument).

>>> c = await cuasync.concatenate([a, b], axis=1)
>>> s = await cuasync.stack([a, b])                  # a new first axis
>>> g = await cuasync.take(x, idx, axis=0)           # rows of x, by device indices
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._core.context import ExecutionContext
from .._core.device import Device
from .._core.op import device_op
from .._core.output import Output
from .._dtypes import SUPPORTED, as_dtype, dtype_name
from .._first_use import launching, unprepared
from .._launch import builtin
from .._launch.kernel import Kernel
from .._tensor import Tensor
from .._transfers.device_copy import (
    byte_strides,
    copy_kernel,
    copy_strided,
    kernel_copy,
    memcpy_able,
    new_tensor,
)
from ..errors import ArgumentError, DTypeError, InvalidDeviceError, ShapeError
from .one_launch import one_launch
from .standin import will_output
from .tensorop import TensorOp, tensor_op
from .views import _axis, expand_dims

__all__ = ["concatenate", "stack", "take", "tril", "triu"]


def _tensors(arrays: Any, name: str) -> list[Tensor | TensorOp]:
    """The tensors and TensorOps of ``arrays`` (the ops run first, in the same submission:
    each must be unused, and appear once)."""
    if isinstance(arrays, (Tensor, TensorOp)) or not isinstance(arrays, (list, tuple)):
        raise ArgumentError(f"{name}: arrays must be a list or tuple of tensors")
    if not arrays:
        raise ArgumentError(f"{name}: arrays must hold at least one tensor")
    for k, t in enumerate(arrays):
        if isinstance(t, TensorOp):
            if t._consumed:
                t._take()  # raises OpConsumedError
            if any(t is u for u in arrays[:k]):
                raise ArgumentError(
                    f"{name}: arrays[{k}] is the TensorOp of an earlier item; an op runs once: "
                    "await it first and join the tensor"
                )
        elif not isinstance(t, Tensor):
            raise ArgumentError(
                f"{name}: arrays[{k}] must be a cuasync.Tensor or TensorOp, got {type(t).__name__}"
            )
    first = arrays[0]
    for k, t in enumerate(arrays):
        if t.device is not first.device:
            raise InvalidDeviceError(f"{name}: arrays[{k}] is on another device than arrays[0]")
    return list(arrays)


def _result_dtype(ts: list[Tensor | TensorOp], name: str) -> np.dtype[Any]:
    """The dtype the joined tensors promote to (the array API's type promotion, as
    numpy's ``result_type``: ``stack([float64, float32])`` is float64)."""
    dtypes = {t.dtype for t in ts}
    if len(dtypes) == 1:
        return ts[0].dtype
    try:
        return as_dtype(np.result_type(*dtypes), "the promoted dtype")
    except (TypeError, DTypeError):
        names = ", ".join(f"arrays[{k}] is {dtype_name(t.dtype)}" for k, t in enumerate(ts))
        raise DTypeError(
            f"{name}: these dtypes promote to no supported dtype ({names}); convert them "
            "to one dtype first (.astype)"
        ) from None


def _copy_into(ctx: ExecutionContext, dst: Tensor, src: Tensor) -> None:
    """Copy ``src`` into the view ``dst`` of a new tensor (a kernel gathers odd views
    and converts another dtype)."""
    if src.dtype != dst.dtype or not memcpy_able(src):
        gathered = new_tensor(ctx, src.shape, dst.dtype, "gather")
        kernel_copy(ctx, gathered, src)
        src = gathered
    sp = ctx.read(src.allocation) + src.offset * src.itemsize
    dp = ctx.write(dst.allocation) + dst.offset * dst.itemsize
    copy_strided(ctx, "dtod", dp, byte_strides(dst), sp, byte_strides(src), src.shape, src.itemsize)


def concatenate(arrays: Sequence[Tensor | TensorOp], axis: int | None = 0) -> TensorOp:
    """The tensors joined along an existing ``axis`` (other axes equal), or with
    ``axis=None`` each flattened (C order) and joined. Mixed dtypes promote as the array
    API says (``result_type``). An item may be a TensorOp: it runs first, in the same
    submission.

    >>> c = await cuasync.concatenate([a, b, a], axis=-1)
    >>> f = await cuasync.concatenate([a, b], axis=None)      # 1-d: a.size + b.size
    """
    ts = _tensors(arrays, "concatenate")
    dt = _result_dtype(ts, "concatenate")
    first = ts[0]
    if axis is None:
        shape: tuple[int, ...] = (sum(t.size for t in ts),)
        ax = 0
    else:
        if first.ndim == 0:
            raise ShapeError(
                "concatenate: 0-d tensors cannot be concatenated along an axis (use stack, "
                "or axis=None)"
            )
        ax = _axis(axis, first.ndim, "concatenate")
        for k, t in enumerate(ts):
            rest = (t.shape[:ax] + t.shape[ax + 1 :], first.shape[:ax] + first.shape[ax + 1 :])
            if t.ndim != first.ndim or rest[0] != rest[1]:
                raise ShapeError(
                    f"concatenate: arrays[{k}] has shape {t.shape}, arrays[0] {first.shape}; "
                    f"all dimensions but axis {ax} must match"
                )
        shape = (*first.shape[:ax], sum(t.shape[ax] for t in ts), *first.shape[ax + 1 :])

    ops = [t for t in ts if isinstance(t, TensorOp)]
    for op in ops:
        op._take()
    # a kernel gathers (and converts) what the copy engines cannot copy as it is; a
    # TensorOp's output taken as a new contiguous tensor
    made = [t if isinstance(t, Tensor) else will_output(t, first.device) for t in ts]
    gathers = any(t.dtype != dt or (t.size and not memcpy_able(t)) for t in made)

    def first_use(on: Device) -> tuple[tuple[Any, Device], ...]:
        mine = unprepared([copy_kernel(dt)], on) if gathers else ()
        return (*(pair for op in ops for pair in op._first_use(on)), *mine)

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        parts = [t if isinstance(t, Tensor) else t._enqueue(ctx).get() for t in ts]
        out = new_tensor(ctx, shape, dt, "concatenate")
        start = 0
        for t in parts:
            if axis is None:  # a contiguous run of out, in t's shape
                n = t.size
                dst = Tensor(out.allocation, t.shape, dt, None, out.offset + start)
            else:
                n = t.shape[ax]
                dst = out[(slice(None),) * ax + (slice(start, start + n),)]
            if t.size:
                _copy_into(ctx, dst, t)
            start += n
        return Output.ready(out)

    joined = device_op(enqueue, first.device, "concatenate", first_use=first_use)
    return tensor_op(joined, shape, dt)


def stack(arrays: Sequence[Tensor | TensorOp], axis: int = 0) -> TensorOp:
    """The tensors (all of one shape) joined along a new ``axis``; mixed dtypes promote
    and TensorOps run first as in :func:`concatenate`.

    >>> s = await cuasync.stack([a, b], axis=-1)          # a, b: (3, 4) -> (3, 4, 2)
    """
    ts = _tensors(arrays, "stack")
    for k, t in enumerate(ts):
        if t.shape != ts[0].shape:
            raise ShapeError(
                f"stack: arrays[{k}] has shape {t.shape}, arrays[0] {ts[0].shape}; they must match"
            )
    ax = _axis(axis, ts[0].ndim + 1, "stack")
    _result_dtype(ts, "stack")  # (raises before the views take the ops)
    return concatenate([_expanded(t, ax) for t in ts], ax)


def _expanded(t: Tensor | TensorOp, axis: int) -> Tensor | TensorOp:
    """``expand_dims(t, axis)``: a view of a tensor, or of a TensorOp's output."""
    if isinstance(t, TensorOp):  # (one call for each type the view functions' TypeVar takes)
        return expand_dims(t, axis)
    return expand_dims(t, axis)


# -- take ---------------------------------------------------------------------------------
#: The files of ``cuasync/kernels`` the take and tril/triu kernels are compiled from.
FILES = ("cancel.cuh", "index.cuh", "joins.cu")
_KERNELS = builtin.KernelFiles(*FILES)


def _take_twin(out: np.ndarray, x: np.ndarray, idx: np.ndarray, *args: Any) -> None:
    _n, nidx, dim, inner, mode = (int(a) for a in args)
    v = idx.astype(np.int64)
    v = v % dim if mode == 0 else np.clip(v, 0, dim - 1)
    src = x.reshape(-1, dim, inner)
    out.reshape(-1, nidx, inner)[...] = src[:, v, :]


def take_kernel(itemsize: int, index: str) -> Kernel:
    """``ca_take`` for elements of ``itemsize`` bytes and ``index`` (int32 or int64) indices."""
    index_c = "int" if index == "int32" else "long long"
    return _KERNELS.kernel(f"ca_take<{builtin.storage(itemsize)}, {index_c}>", _take_twin)


def take(x: Tensor, indices: Tensor, axis: int | None = None, *, mode: str = "wrap") -> TensorOp:
    """Elements of ``x`` at ``indices`` (an int32/int64 device tensor) along ``axis``
    (None: of the flattened ``x``): numpy's ``take``.

    A kernel cannot raise for an index out of range: ``mode="wrap"`` (the default; for
    indices in ``-n..n-1`` it is numpy's default) wraps around, ``"clip"`` clips to
    ``0..n-1`` as numpy's ``mode="clip"``.

    >>> rows = await cuasync.take(x, idx, axis=0)     # x: (5, 3), idx: (4,) -> (4, 3)
    """
    if not isinstance(x, Tensor):
        raise ArgumentError(f"take: x must be a cuasync.Tensor, got {type(x).__name__}")
    if not isinstance(indices, Tensor):
        raise ArgumentError(
            f"take: indices must be a cuasync.Tensor of int32 or int64 (upload them with "
            f"cuasync.from_host), got {type(indices).__name__}"
        )
    if dtype_name(indices.dtype) not in ("int32", "int64"):
        raise DTypeError(
            f"take: indices must be int32 or int64, got {dtype_name(indices.dtype)}; "
            "convert them with .astype('int64')"
        )
    if indices.device is not x.device:
        raise InvalidDeviceError("take: indices are on another device than x")
    if mode not in ("wrap", "clip"):
        raise ArgumentError(f"take: mode must be 'wrap' or 'clip', got {mode!r}")
    if axis is None:
        dim, inner = x.size, 1
        shape = indices.shape
    else:
        ax = _axis(axis, x.ndim, "take")
        dim, inner = x.shape[ax], math.prod(x.shape[ax + 1 :])
        shape = (*x.shape[:ax], *indices.shape, *x.shape[ax + 1 :])
    if dim == 0 and indices.size:
        raise ArgumentError("take: cannot take indices from an empty axis")
    kernel = take_kernel(x.itemsize, dtype_name(indices.dtype))
    storage = builtin.FILL_DTYPES[x.itemsize]
    code = 0 if mode == "wrap" else 1
    if x.is_contiguous and indices.is_contiguous:  # (one launch: the core's raw launch)
        n = math.prod(shape)
        flat_idx = Tensor(indices.allocation, (indices.size,), indices.dtype, None, indices.offset)
        tail = (builtin.bit_view(builtin.flat(x), storage), flat_idx, n, indices.size, dim, inner)
        view = SUPPORTED[storage]
        return one_launch(kernel, x.device, "take", shape, x.dtype, (n,), view, n, (*tail, code))

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        out = new_tensor(ctx, shape, x.dtype, "take")
        if out.size == 0:
            return Output.ready(out)
        src, idx = x, indices
        if not src.is_contiguous:
            src = new_tensor(ctx, x.shape, x.dtype, "take")
            kernel_copy(ctx, src, x)
        if not idx.is_contiguous:
            idx = new_tensor(ctx, indices.shape, indices.dtype, "take")
            kernel_copy(ctx, idx, indices)
        flat_idx = Tensor(idx.allocation, (idx.size,), idx.dtype, None, idx.offset)
        views = [builtin.bit_view(builtin.flat(t), storage) for t in (out, src)]
        n = out.size
        builtin.launch(
            ctx, kernel, n, *views, flat_idx, n, indices.size, dim, inner, code, scoped=True
        )
        return Output.ready(out)

    copies = [copy_kernel(t.dtype) for t in (x, indices) if not t.is_contiguous]
    op = device_op(enqueue, x.device, "take", first_use=launching(kernel, *copies))
    return tensor_op(op, shape, x.dtype)


# -- tril / triu --------------------------------------------------------------------------
def _tri_twin(out: np.ndarray, x: np.ndarray, *args: Any) -> None:
    _n, rows, cols, k, upper = (int(a) for a in args)
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    keep = (c - r >= k) if upper else (c - r <= k)
    src = x.reshape(-1, rows, cols)
    out.reshape(-1, rows, cols)[...] = np.where(keep, src, np.zeros((), src.dtype))


def tri_kernel(itemsize: int) -> Kernel:
    """``ca_tri`` for elements of ``itemsize`` bytes."""
    return _KERNELS.kernel(f"ca_tri<{builtin.storage(itemsize)}>", _tri_twin)


def _tri(x: Tensor, k: int, upper: bool) -> TensorOp:
    name = "triu" if upper else "tril"
    if not isinstance(x, Tensor):
        raise ArgumentError(f"{name}: x must be a cuasync.Tensor, got {type(x).__name__}")
    if x.ndim < 2:
        raise ShapeError(f"{name}: x must have at least 2 dimensions, got shape {x.shape}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ArgumentError(f"{name}: k must be an int, got {k!r}"[:200])
    kernel = tri_kernel(x.itemsize)
    storage = builtin.FILL_DTYPES[x.itemsize]
    rows, cols = x.shape[-2:]
    if x.is_contiguous:  # (one launch: the core's raw launch)
        n = x.size
        tail = (builtin.bit_view(builtin.flat(x), storage), n, rows, cols, int(k), int(upper))
        view = SUPPORTED[storage]
        return one_launch(kernel, x.device, name, x.shape, x.dtype, (n,), view, n, tail)

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        out = new_tensor(ctx, x.shape, x.dtype, name)
        if out.size == 0:
            return Output.ready(out)
        src = x
        if not src.is_contiguous:
            src = new_tensor(ctx, x.shape, x.dtype, name)
            kernel_copy(ctx, src, x)
        views = [builtin.bit_view(builtin.flat(t), storage) for t in (out, src)]
        args = (out.size, rows, cols, int(k), int(upper))
        builtin.launch(ctx, kernel, out.size, *views, *args, scoped=True)
        return Output.ready(out)

    copies = [] if x.is_contiguous else [copy_kernel(x.dtype)]
    op = device_op(enqueue, x.device, name, first_use=launching(kernel, *copies))
    return tensor_op(op, x.shape, x.dtype)


def tril(x: Tensor, k: int = 0) -> TensorOp:
    """A copy of ``x`` with the elements above the ``k``-th diagonal of its last two axes
    zeroed (numpy's ``tril``).

    >>> lower = await cuasync.tril(m, k=-1)
    """
    return _tri(x, k, False)


def triu(x: Tensor, k: int = 0) -> TensorOp:
    """A copy of ``x`` with the elements below the ``k``-th diagonal zeroed (``triu``).

    >>> upper = await cuasync.triu(m)
    """
    return _tri(x, k, True)
