"""The array API standard's manipulation functions cuasync lacked, and numpy's.

Views (zero-copy, returned now, as :func:`cuasync.broadcast_to` and
:func:`cuasync.permute_dims` are): ``broadcast_arrays``, ``moveaxis``, ``unstack``,
``meshgrid``, ``matrix_transpose``. Ops (a new tensor, to await): ``repeat`` and
``tile`` (one copy of a broadcast view), ``roll`` (joins of slices), ``concat``;
``reshape`` is an op too, whose output is a view of ``x`` where the layout allows
(``copy=True`` always copies, ``copy=False`` refuses to).

>>> a, b = cuasync.broadcast_arrays(x, y)           # views, of one shape
>>> t = await cuasync.tile(x, (2, 1))
>>> r = await cuasync.roll(x, 1, axis=0)
>>> m = await cuasync.reshape(x, (4, -1))
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
from .._tensor import Shape, Tensor, check_shape, resolve_shape, viewing_strides
from .._transfers.copies import empty
from ..errors import ArgumentError, ShapeError
from .joins import concatenate
from .on_output import X, first_use_of, frozen, of_output, on_tensor, view_op, viewing
from .standin import is_standin, standin, will_output
from .tensorop import TensorOp, flattened, tensor_op
from .views import _axis, _tensor, broadcast_to, expand_dims, permute

__all__ = [
    "broadcast_arrays",
    "broadcast_shapes",
    "concat",
    "matrix_transpose",
    "meshgrid",
    "moveaxis",
    "repeat",
    "reshape",
    "roll",
    "tile",
    "unstack",
]


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The shape ``shapes`` broadcast to, by the array API's (numpy's) rules.

    >>> cuasync.broadcast_shapes((3, 1), (4,))
    (3, 4)
    """
    dims = [check_shape(s, "shapes") for s in shapes]
    ndim = max((len(s) for s in dims), default=0)
    out: list[int] = []
    for j in range(ndim):
        sizes = {s[j - ndim + len(s)] for s in dims if j - ndim + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise ShapeError(f"broadcast_shapes: the shapes {dims} do not broadcast (axis {j})")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def broadcast_arrays(*arrays: Tensor) -> list[Tensor]:
    """Views of ``arrays`` broadcast to one shape (stride 0 where repeated).

    >>> a, b = cuasync.broadcast_arrays(col, row)     # (3, 1), (4,) -> (3, 4) both
    """
    ts = [_tensor(a, "broadcast_arrays") for a in arrays]
    shape = broadcast_shapes(*(t.shape for t in ts))
    return [broadcast_to(t, shape) for t in ts]


def moveaxis(x: X, source: int | Sequence[int], destination: int | Sequence[int]) -> X:
    """``x`` with the axes ``source`` moved to the positions ``destination``, the
    others in their order: a view.

    >>> cuasync.moveaxis(t, 0, -1).shape             # t: (2, 3, 4)
    (3, 4, 2)
    """
    src, dst = frozen(source), frozen(destination)
    return viewing(x, "moveaxis", lambda t: _moveaxis(t, src, dst))


def _moveaxis(x: Tensor, source: int | Sequence[int], destination: int | Sequence[int]) -> Tensor:
    src = (source,) if isinstance(source, (int, np.integer)) else tuple(source)
    dst = (destination,) if isinstance(destination, (int, np.integer)) else tuple(destination)
    if len(src) != len(dst):
        raise ArgumentError(
            f"moveaxis: source {source!r} and destination {destination!r} name different "
            "numbers of axes"
        )
    s = [_axis(a, x.ndim, "moveaxis", "source") for a in src]
    d = [_axis(a, x.ndim, "moveaxis", "destination") for a in dst]
    if len(set(s)) != len(s) or len(set(d)) != len(d):
        raise ArgumentError(f"moveaxis: source {source!r} or destination {destination!r} repeats")
    order = [j for j in range(x.ndim) if j not in s]
    for dest, a in sorted(zip(d, s, strict=True)):
        order.insert(dest, a)
    return permute(x, order, "moveaxis")


def matrix_transpose(x: X) -> X:
    """``x`` with its last two axes swapped (a stack of matrices transposed): a view.

    >>> cuasync.matrix_transpose(t).shape            # t: (5, 2, 3)
    (5, 3, 2)
    """
    return viewing(x, "matrix_transpose", _matrix_transpose)


def _matrix_transpose(x: Tensor) -> Tensor:
    if x.ndim < 2:
        raise ShapeError(f"matrix_transpose: x must have 2 or more axes, it has shape {x.shape}")
    return permute(x, [*range(x.ndim - 2), x.ndim - 1, x.ndim - 2], "matrix_transpose")


def unstack(x: Tensor, /, *, axis: int = 0) -> tuple[Tensor, ...]:
    """The slices of ``x`` along ``axis``, as views.

    >>> rows = cuasync.unstack(m)                    # m: (3, 4) -> three (4,) views
    """
    x = _tensor(x, "unstack")
    a = _axis(axis, x.ndim, "unstack")
    lead = (slice(None),) * a
    return tuple(x[(*lead, i)] for i in range(x.shape[a]))


def meshgrid(*arrays: Tensor, indexing: str = "xy") -> list[Tensor]:
    """Coordinate grids of the 1-d ``arrays``: views of one shape (stride 0 across the
    other axes); ``indexing="xy"`` (default) swaps the first two axes, ``"ij"`` not.

    >>> gx, gy = cuasync.meshgrid(xs, ys)             # (len(ys), len(xs)) both
    """
    if indexing not in ("xy", "ij"):
        raise ArgumentError(f'meshgrid: indexing must be "xy" or "ij", got {indexing!r}')
    ts = [_tensor(a, "meshgrid") for a in arrays]
    for t in ts:
        if t.ndim != 1:
            raise ShapeError(f"meshgrid: every array must be 1-d, one has shape {t.shape}")
    if ts and len({t.dtype for t in ts}) > 1:
        raise ArgumentError("meshgrid: the arrays must have one dtype (the array API's)")
    shape = [t.shape[0] for t in ts]
    if indexing == "xy" and len(ts) > 1:
        shape[0], shape[1] = shape[1], shape[0]
    grids = []
    for j, t in enumerate(ts):
        pos = j
        if indexing == "xy" and len(ts) > 1 and j < 2:
            pos = 1 - j
        view = Tensor(
            t.allocation,
            tuple(shape),
            t.dtype,
            tuple(t.strides[0] if k == pos else 0 for k in range(len(ts))),
            t.offset,
        )
        grids.append(view)
    return grids


def concat(arrays: Sequence[Tensor], /, *, axis: int | None = 0) -> TensorOp:
    """The array API's name of :func:`cuasync.concatenate` (``axis=None``: flattened).

    >>> c = await cuasync.concat([a, b], axis=1)
    """
    return concatenate(arrays, axis=axis)


def reshape(x: Tensor | TensorOp, /, shape: Sequence[int], *, copy: bool | None = None) -> TensorOp:
    """``x`` in another shape (-1 infers one length), in C order: the output is a view
    of ``x`` where the layout allows, else a copy (``copy=True``: a copy always;
    ``copy=False``: a view or a ShapeError, now).

    >>> m = await cuasync.reshape(x, (2, -1))
    >>> c = await cuasync.reshape(x.T, (-1,))          # a copy: x.T is not contiguous
    """
    if copy not in (None, True, False):
        raise ArgumentError(f"reshape: copy must be None, True or False, got {copy!r}"[:200])
    if isinstance(x, TensorOp):
        new = resolve_shape(x.size, shape)
        if copy is None:
            return x.reshape(new)  # (a view of its output where the strides allow, else a copy)
        out = will_output(x, x.device)  # (its out=, the view a view op makes, or new)
        if copy is False and out.size and viewing_strides(out.shape, out.strides, new) is None:
            raise ShapeError(
                f"reshape: copy=False, and the op's output (shape {out.shape}, strides "
                f"{out.strides}: an out= or a view) cannot be viewed in shape {new}; pass "
                "copy=None to copy"
            )
        if copy is True and not is_standin(out):  # (its output is a tensor someone holds)
            return on_tensor(x, "reshape", new, x.dtype, lambda t: t.dup().reshape(new))
        return x.reshape(new)
    x = _tensor(x, "reshape")
    new = resolve_shape(x.size, shape)
    if copy is True:
        return x.dup().reshape(new)
    try:
        view = x.reshape(new)
    except ShapeError:
        if copy is False:
            raise ShapeError(
                f"reshape: copy=False, and x (shape {x.shape}, strides {x.strides}) cannot "
                f"be viewed in shape {new}; pass copy=None to copy"
            ) from None
        return x.dup().reshape(new)
    return view_op(view, "reshape")


def _count(value: Any, name: str, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ArgumentError(f"{name}: {argument} must be an int >= 0, got {value!r}"[:200])
    return int(value)


def _copied(view: Tensor, shape: Shape) -> TensorOp:
    """A contiguous copy of ``view``, in ``shape`` (the same size)."""
    if math.prod(shape) == 0:
        return empty(shape, dtype=view.dtype)
    return view.dup().reshape(shape)


def repeat(x: Tensor | TensorOp, repeats: int, /, *, axis: int | None = None) -> TensorOp:
    """Each element repeated ``repeats`` times along ``axis`` (None: of ``x``
    flattened), as numpy's; one copy of a broadcast view.

    >>> r = await cuasync.repeat(x, 2, axis=0)          # (3, 4) -> (6, 4)
    """
    if isinstance(x, TensorOp):
        return of_output(x, "repeat", lambda t: repeat(t, repeats, axis=axis))  # (ints)
    x = _tensor(x, "repeat", "a cuasync.Tensor or TensorOp")
    if not isinstance(repeats, (int, np.integer)):
        raise ArgumentError(
            "repeat: repeats must be an int; per-element counts (an array) give a "
            f"data-dependent shape, which cuasync does not build yet (got {type(repeats).__name__})"
        )
    r = _count(repeats, "repeat", "repeats")
    if axis is None:
        flat = flattened(x)  # (a view where the strides allow, else a copy)
        if isinstance(flat, TensorOp):
            return on_tensor(flat, "repeat", (x.size * r,), x.dtype, lambda t: repeat(t, r))
        x, axis = flat, 0
    a = _axis(axis, x.ndim, "repeat")
    wide = broadcast_to(expand_dims(x, a + 1), (*x.shape[: a + 1], r, *x.shape[a + 1 :]))
    shape = tuple(d * r if j == a else d for j, d in enumerate(x.shape))
    return _copied(wide, shape)


def tile(x: Tensor | TensorOp, repetitions: Sequence[int] | int, /) -> TensorOp:
    """``x`` repeated ``repetitions[j]`` times along each axis (numpy's ``tile``: the
    shorter of ``x.shape`` and ``repetitions`` is padded with leading 1s; an int is one
    repetition count, of the last axis).

    >>> t = await cuasync.tile(row, (3, 2))            # row: (4,) -> (3, 8)
    """
    if isinstance(x, TensorOp):
        reps = frozen(repetitions)
        return of_output(x, "tile", lambda t: tile(t, reps))
    x = _tensor(x, "tile", "a cuasync.Tensor or TensorOp")
    if isinstance(repetitions, (int, np.integer)):
        repetitions = (repetitions,)  # (numpy's; bools are refused by _count)
    elif not isinstance(repetitions, Sequence | np.ndarray):
        raise ArgumentError(
            f"tile: repetitions must be an int or a sequence of ints, got "
            f"{type(repetitions).__name__}"
        )
    reps = tuple(_count(r, "tile", "repetitions") for r in repetitions)
    n = max(x.ndim, len(reps))
    reps = (1,) * (n - len(reps)) + reps
    base = x if x.ndim == n else expand_dims(x, tuple(range(n - x.ndim)))
    # (r0, d0, r1, d1, ...): each axis of base after a new one of its repetitions
    inter = expand_dims(base, tuple(2 * j for j in range(n)))
    wide = broadcast_to(
        inter, tuple(v for pair in zip(reps, base.shape, strict=True) for v in pair)
    )
    return _copied(wide, tuple(r * d for r, d in zip(reps, base.shape, strict=True)))


def roll(
    x: Tensor | TensorOp,
    /,
    shift: int | Sequence[int],
    *,
    axis: int | Sequence[int] | None = None,
) -> TensorOp:
    """The elements of ``x`` shifted by ``shift`` along ``axis`` (wrapping around);
    ``axis=None``: of ``x`` flattened, then reshaped back, as numpy's.

    >>> r = await cuasync.roll(x, -1, axis=1)
    >>> r = await cuasync.roll(x, (1, 2), axis=(0, 1))
    """
    if isinstance(x, TensorOp):
        shifts, axes = frozen(shift), frozen(axis)
        return of_output(x, "roll", lambda t: roll(t, shifts, axis=axes))
    x = _tensor(x, "roll", "a cuasync.Tensor or TensorOp")
    if axis is None:
        if not isinstance(shift, (int, np.integer)):
            raise ArgumentError("roll: axis=None takes one int shift")
        flat = x.reshape((-1,)) if x.is_contiguous else None
        if flat is None:
            return on_tensor(x.dup(), "roll", x.shape, x.dtype, lambda t: roll(t, shift))
        return _reshaped(roll(flat, shift, axis=0), x.shape)
    shifts = (shift,) if isinstance(shift, (int, np.integer)) else tuple(shift)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if len(shifts) == 1 and len(axes) > 1:
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        raise ArgumentError(f"roll: shift {shift!r} and axis {axis!r} differ in length")
    moves: dict[int, int] = {}
    for s, a in zip(shifts, axes, strict=True):
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)):
            raise ArgumentError(f"roll: shift must be an int or ints, got {shift!r}"[:200])
        j = _axis(a, x.ndim, "roll")
        moves[j] = moves.get(j, 0) + int(s)
    moves = {j: s % x.shape[j] for j, s in moves.items() if x.shape[j]}
    moves = {j: s for j, s in moves.items() if s}
    if not moves:
        return x.dup()

    def step(t: Tensor, j: int, s: int) -> TensorOp:
        lead = (slice(None),) * j
        return concatenate([t[(*lead, slice(-s, None))], t[(*lead, slice(None, -s))]], axis=j)

    items = sorted(moves.items())
    first = step(x, *items[0])
    if len(items) == 1:
        return first
    first._take()

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        cur = first._enqueue(ctx).get()
        for j, s in items[1:]:
            op = step(cur, j, s)
            op._take()
            cur = op._enqueue(ctx).get()
        return Output.ready(cur)

    def first_use(on: Device) -> tuple[tuple[Any, Device], ...]:
        """The steps' kernels: the first of x, the others of new contiguous tensors."""
        later = standin(x.shape, x.dtype, on)
        return (
            *first._first_use(on),
            *(pair for j, s in items[1:] for pair in first_use_of(step(later, j, s), on)),
        )

    op = device_op(enqueue, x.device, "roll", first_use=first_use)
    return tensor_op(op, x.shape, x.dtype)


def _reshaped(op: TensorOp, shape: Shape) -> TensorOp:
    return op.reshape(shape)
