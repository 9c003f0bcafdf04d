"""Reductions built on the reduction kernels: ``all``, ``any``, ``count_nonzero``,
``var``, ``std``; and ``diff`` (differences of neighbours, elementwise).

``all``/``any`` reduce ``x != 0`` (fused into the reduction's loads) with logical
and/or; ``count_nonzero`` sums it as int64. ``var``/``std`` take two passes, as numpy's:
the mean (kept dims), then the sum of squared deviations (the subtraction fused into
the reduction's loads), divided by ``N - correction``. Float tensors only (the array API
standard's); float16 squares and sums in float32.

>>> ok = await cuasync.all(x > 0)                    # a 0-d bool tensor
>>> v = await cuasync.var(x, axis=0, correction=1)   # numpy's var(x, 0, ddof=1)
>>> d = await cuasync.diff(x, axis=-1)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._axes import Axes
from .._core.context import ExecutionContext
from .._core.device import Device
from .._core.op import device_op
from .._core.output import Output
from .._dtypes import dtype_name
from .._tensor import Tensor
from ..errors import ArgumentError, DTypeError, ShapeError
from . import elementwise
from .expr import Node
from .joins import concatenate
from .on_output import first_use_of, on_tensor
from .reductions import normalize_axes, reduce_op
from .scan import _operand
from .standin import standin
from .tensorop import TensorOp, tensor_op

__all__ = ["all", "any", "count_nonzero", "diff", "std", "var"]

#: The dtypes ``var`` and ``std`` take, and the dtype each accumulates in.
_MOMENT_ACC = {
    "float16": "float32",
    "bfloat16": "float32",
    "float32": "float32",
    "float64": "float64",
}


def _truth(x: Tensor | TensorOp) -> Tensor | TensorOp:
    """``x != 0`` (``x`` itself when it is bool)."""
    return x if x.dtype == np.bool_ else elementwise.not_equal(x, 0)


def _check_axis(x: Tensor | TensorOp, axis: Any, name: str) -> tuple[int, ...]:
    return normalize_axes(axis, x.ndim, name)


def all(x: Tensor | TensorOp, /, *, axis: Axes = None, keepdims: bool = False) -> TensorOp:
    """Whether every element over ``axis`` (None: all) is nonzero: a bool tensor; True
    for an empty axis.

    >>> ok = await cuasync.all(a == b)
    >>> rows = await cuasync.all(x, axis=1, keepdims=True)
    """
    x = _operand(x, "all")
    axes = _check_axis(x, axis, "all")
    return reduce_op("all", "prod", _truth(x), axes, dtype="bool", keepdims=keepdims)


def any(x: Tensor | TensorOp, /, *, axis: Axes = None, keepdims: bool = False) -> TensorOp:
    """Whether some element over ``axis`` (None: all) is nonzero: a bool tensor; False
    for an empty axis.

    >>> bad = await cuasync.any(cuasync.not_equal(x, x))   # a NaN anywhere
    """
    x = _operand(x, "any")
    axes = _check_axis(x, axis, "any")
    return reduce_op("any", "sum", _truth(x), axes, dtype="bool", keepdims=keepdims)


def count_nonzero(
    x: Tensor | TensorOp, /, *, axis: Axes = None, keepdims: bool = False
) -> TensorOp:
    """The number of nonzero elements over ``axis`` (None: all), int64.

    >>> n = await cuasync.count_nonzero(x > 0.5, axis=0)
    """
    x = _operand(x, "count_nonzero")
    axes = _check_axis(x, axis, "count_nonzero")
    return reduce_op("count_nonzero", "sum", _truth(x), axes, dtype="int64", keepdims=keepdims)


#: The var/std layouts whose kernels are all prepared (on a device): first uses skipped.
_READY: set[tuple[Any, ...]] = set()


def _moment(name: str, x: Any, axis: Any, correction: Any, keepdims: Any, root: bool) -> TensorOp:
    x = _operand(x, name)
    dt = dtype_name(x.dtype)
    acc = _MOMENT_ACC.get(dt)
    if acc is None:
        raise DTypeError(
            f"{name}: x has dtype {dt}; {name} takes float16, bfloat16, float32 and float64 "
            "tensors (real floats): convert first, x.astype('float32')"
        )
    axes = _check_axis(x, axis, name)
    if isinstance(correction, bool) or not isinstance(correction, (int, float, np.number)):
        raise ArgumentError(f"{name}: correction must be a number, got {correction!r}"[:200])
    if not correction >= 0:
        raise ArgumentError(f"{name}: correction must be >= 0, got {correction!r}")
    if not isinstance(keepdims, (bool, np.bool_)):
        raise ArgumentError(f"{name}: keepdims must be a bool, got {keepdims!r}"[:200])
    n = math.prod(x.shape[a] for a in axes)
    shape = tuple(1 if j in axes else d for j, d in enumerate(x.shape) if keepdims or j not in axes)
    divisor = float(max(n - float(correction), 0.0))  # numpy's: 0 gives inf or nan

    def moment(t: Tensor, mean: Tensor | TensorOp) -> TensorOp:
        """The result's op, from ``t`` and its mean over ``axes`` (kept as axes of 1)."""
        dev = elementwise.subtract(t, mean)._absorb("x")  # in acc
        square = Node(
            "op", "vdot", t.shape, np.dtype(acc), None, (dev, dev), (np.dtype(acc),) * 2, t.device
        )
        total = reduce_op(name, "sum", TensorOp(square), axes, dtype=acc, keepdims=bool(keepdims))
        result: TensorOp = elementwise.divide(total, divisor)
        if root:
            result = elementwise.sqrt(result)
        if acc != dt:
            result = result.astype(dt)
        result._take()
        return result

    def build(t: Tensor) -> TensorOp:
        def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
            mean = reduce_op(name, "mean", t, axes, dtype=acc, keepdims=True)
            mean._take()
            return moment(t, mean._enqueue(ctx).get())._enqueue(ctx)

        def first_use(on: Device) -> Sequence[tuple[Any, Device]]:
            key = (on.ordinal, name, t.shape, t.strides, dt, axes, bool(keepdims), root)
            if key in _READY:  # (building the ops again costs as much as running them)
                return ()
            # the same ops of the mean op itself (never executed): the kernels are those
            # of a mean that is a new contiguous tensor, as the one enqueue makes
            mean = reduce_op(name, "mean", t, axes, dtype=acc, keepdims=True)
            pairs = moment(t, mean)._first_use(on)
            if not pairs:
                if len(_READY) >= 4096:  # (shapes computed per call: stay bounded)
                    _READY.clear()
                _READY.add(key)
            return pairs

        return tensor_op(device_op(enqueue, t.device, name, first_use=first_use), shape, x.dtype)

    return on_tensor(x, name, shape, x.dtype, build)


def var(
    x: Tensor | TensorOp,
    /,
    *,
    axis: Axes = None,
    correction: float = 0.0,
    keepdims: bool = False,
) -> TensorOp:
    """The variance over ``axis`` (None: all): the sum of squared deviations from the
    mean divided by ``N - correction`` (numpy's ``ddof``); of float tensors, in their
    dtype (float16 computed in float32).

    >>> v = await cuasync.var(x, axis=-1, correction=1)
    """
    return _moment("var", x, axis, correction, keepdims, root=False)


def std(
    x: Tensor | TensorOp,
    /,
    *,
    axis: Axes = None,
    correction: float = 0.0,
    keepdims: bool = False,
) -> TensorOp:
    """The standard deviation over ``axis``: the square root of :func:`var`.

    >>> s = await cuasync.std(x, axis=0, keepdims=True)
    """
    return _moment("std", x, axis, correction, keepdims, root=True)


def _step(t: Tensor, axis: int) -> TensorOp:
    """``t[1:] - t[:-1]`` along ``axis`` (``!=`` for bools, as numpy's)."""
    lead = (slice(None),) * axis
    hi = lo = t  # (empty: so is the difference)
    if t.shape[axis]:
        hi, lo = t[(*lead, slice(1, None))], t[(*lead, slice(None, -1))]
    if t.dtype == np.bool_:
        return elementwise.not_equal(hi, lo)
    return elementwise.subtract(hi, lo)


def _joinable(part: Any, argument: str, x: Tensor, axis: int) -> None:
    """Raise, worded as ``diff``'s, where ``part`` (``prepend``/``append``) cannot be joined
    to ``x`` along ``axis``: not a tensor, or of another shape but along ``axis``."""
    if part is None:
        return
    if not isinstance(part, Tensor):
        raise ArgumentError(
            f"diff: {argument} must be a cuasync.Tensor (the shape of x but along axis "
            f"{axis}), got {type(part).__name__}; make one with cuasync.full"
        )
    if part.ndim != x.ndim or [d for j, d in enumerate(part.shape) if j != axis] != [
        d for j, d in enumerate(x.shape) if j != axis
    ]:
        raise ShapeError(
            f"diff: {argument} has shape {part.shape}, x has shape {x.shape}; they must "
            f"match but along axis {axis}"
        )


def diff(
    x: Tensor | TensorOp,
    /,
    *,
    axis: int = -1,
    n: int = 1,
    prepend: Tensor | None = None,
    append: Tensor | None = None,
) -> TensorOp:
    """The ``n``-th differences along ``axis``: ``x[1:] - x[:-1]``, ``n`` times
    (bools: ``!=``); ``prepend``/``append`` are joined to ``x`` along ``axis`` first.
    The axis shrinks by ``n`` (to 0 at least).

    >>> d = await cuasync.diff(x)                       # along the last axis
    >>> d2 = await cuasync.diff(x, axis=0, n=2)
    """
    x = _operand(x, "diff")
    if x.ndim == 0:
        raise ArgumentError("diff: x is 0-d; differences need at least one axis")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ArgumentError(f"diff: n must be an int >= 0, got {n!r}"[:200])
    if axis is None and x.ndim != 1:  # (None is one axis only of a vector)
        raise ArgumentError(f"diff: axis must be an int for a {x.ndim}-d tensor, got None")
    (a,) = normalize_axes(axis, x.ndim, "diff", allow_tuple=False)
    if prepend is not None or append is not None:
        if not isinstance(x, Tensor):
            raise ArgumentError(
                "diff: prepend= and append= take a tensor x; await the TensorOp first"
            )
        for part, argument in ((prepend, "prepend"), (append, "append")):
            _joinable(part, argument, x, a)
        parts = [p for p in (prepend, x, append) if p is not None]
        x = concatenate(parts, axis=a)
    n = int(n)
    if n == 0:
        return x.dup() if isinstance(x, Tensor) else x
    shape = tuple(max(d - n, 0) if j == a else d for j, d in enumerate(x.shape))
    dtype = x.dtype
    if n == 1 and isinstance(x, Tensor):
        return _step(x, a)

    def build(t: Tensor) -> TensorOp:
        if n == 1:
            return _step(t, a)

        def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
            cur = t
            for _ in range(n):  # numpy's order: each difference rounded, as numpy's
                step = _step(cur, a)
                step._take()
                cur = step._enqueue(ctx).get()
            return Output.ready(cur)

        def first_use(on: Device) -> tuple[tuple[Any, Device], ...]:
            """The steps' kernels: the first of t, the others of new contiguous tensors."""
            pairs: list[tuple[Any, Device]] = []
            cur = t
            for _ in range(n):
                step = _step(cur, a)
                pairs += first_use_of(step, on)
                cur = standin(step.shape, step.dtype, on)
            return tuple(pairs)

        op = device_op(enqueue, t.device, "diff", first_use=first_use)
        return tensor_op(op, shape, dtype)

    return on_tensor(x, "diff", shape, dtype, build)
