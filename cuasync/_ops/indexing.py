"""The indexing family: ``gather``, ``take_along_axis``, ``scatter``, ``dynamic_slice``,
``dynamic_update_slice`` and ``pad``, with numpy's names and semantics where numpy has
the function, XLA's where it does not.

Each returns a :class:`~cuasync.TensorOp` whose shape and dtype are known when it is
built (bad arguments raise then) and takes ``out=``. Indices are int32 or int64 device
tensors, read by the kernels: nothing here waits for the device. A kernel cannot raise
for an index out of range, so each op says what it does with one (``mode`` /
``index_mode``: wrap, clip or, for ``scatter``, drop).

>>> g = await cuasync.take_along_axis(x, idx, axis=1)
>>> y = await cuasync.scatter(x, idx, upd, axis=0, mode="add")
>>> w = await cuasync.dynamic_slice(cache, pos, (1, 64))     # pos: an int64 device tensor
>>> p = await cuasync.pad(x, ((1, 1), (0, 2)), mode="reflect")
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._core.context import ExecutionContext
from .._core.device import Device
from .._core.op import device_op
from .._core.output import Output
from .._dtypes import DTYPES, SUPPORTED, dtype_name
from .._first_use import unprepared
from .._launch import builtin
from .._launch.kernel import Kernel
from .._tensor import Shape, Tensor, overlap
from .._transfers.device_copy import copy_kernel, kernel_copy, memcpy_able, new_tensor
from ..errors import ArgumentError, DTypeError, InvalidDeviceError, ShapeError
from .creation import _bits, _enqueue_fill, _fill_kernel, _representable
from .elementwise import check_out
from .expr import Node
from .fused_operand import Call, Fused, fusable
from .joins import _copy_into
from .one_launch import one_launch
from .tensorop import Operand as ValueOperand  # (Operand here: the checks' view, below)
from .tensorop import TensorOp
from .views import _axis, broadcast_to

#: An int, numpy's integers too.
IntLike = int | np.integer[Any]
#: ``dynamic_slice``'s starts: one int per axis, or an int32/int64 device tensor.
StartIndices = Sequence[IntLike] | Tensor | TensorOp
#: numpy's ``pad_width``: ``n``, ``(n,)``, ``(before, after)`` or a pair per axis.
PadWidth = IntLike | Sequence[IntLike] | Sequence[Sequence[IntLike]]

__all__ = [
    "dynamic_slice",
    "dynamic_update_slice",
    "gather",
    "pad",
    "scatter",
    "take_along_axis",
]

#: The files of ``cuasync/kernels`` this family is compiled from.
FILES = ("cast.cuh", "cancel.cuh", "index.cuh", "indexing.cu")

#: The axes the device-start window kernel and the pad kernel take at most.
MAX_AXES = 6

#: The dtypes ``scatter`` combines (``add``, ``min``, ``max``) with the device's atomics.
_REAL = ("int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64")
COMBINE_DTYPES: dict[str, tuple[str, ...]] = {
    "add": (*_REAL, "complex64", "complex128"),
    "min": _REAL,
    "max": _REAL,
}
#: float16 and bfloat16 combine through a compare-and-swap on the 32-bit word (no native
#: 16-bit atomics needed): ``ca_scatter_narrow``'s ``F``.
_NARROW = {"float16": 0, "bfloat16": 1}
_SCATTER_MODES = ("set", "add", "min", "max")
_INDEX_MODES = {"wrap": 0, "clip": 1, "drop": 2}

_KERNELS = builtin.KernelFiles(*FILES)


def _index_c(index: str) -> str:
    return "int" if index == "int32" else "long long"


def _longs(names: str, sign: str = "") -> tuple[str, ...]:
    """C declarations of ``long long`` parameters, for a fused kernel's :class:`Call`."""
    return tuple(f"{sign}long long {n}" for n in names.split())


# -- the numpy twins (the emulator runs these for the kernels) ----------------------------
def _wrap(idx: np.ndarray, dim: int, mode: int) -> np.ndarray:
    v = idx.astype(np.int64)
    if mode == 0:
        return v % dim
    if mode == 1:
        return np.clip(v, 0, dim - 1)
    v = np.where(v < 0, v + dim, v)
    return np.where((v < 0) | (v >= dim), -1, v)


def _gather_twin(out: np.ndarray, x: np.ndarray, idx: np.ndarray, *args: Any) -> None:
    _n, pre, nidx, dim, inner, mode = (int(a) for a in args)
    v = _wrap(idx, dim, mode).reshape(-1, nidx)
    src = x.reshape(-1, pre, dim, inner)
    batch = np.arange(src.shape[0])[:, None]
    out.reshape(-1, pre, nidx, inner)[...] = src[batch, :, v, :].transpose(0, 2, 1, 3)


def _along(nidx: int, inner: int, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The outer and inner coordinates of each element of an (outer, nidx, inner) array."""
    shape = (-1, nidx, inner)
    outer = np.arange(idx.reshape(shape).shape[0])[:, None, None]
    return outer, np.arange(inner)[None, None, :]


def _gather_along_twin(out: np.ndarray, x: np.ndarray, idx: np.ndarray, *args: Any) -> None:
    _n, nidx, dim, inner, mode = (int(a) for a in args)
    v = _wrap(idx, dim, mode).reshape(-1, nidx, inner)
    o, c = _along(nidx, inner, idx)
    out.reshape(v.shape)[...] = x.reshape(-1, dim, inner)[o, v, c]


def _scatter_twin(combine: int, narrow: Any) -> Callable[..., None]:
    """``ca_scatter`` (``ca_scatter_narrow`` for a ``narrow`` dtype, given as its bits)."""

    def twin(out: np.ndarray, idx: np.ndarray, upd: np.ndarray, *args: Any) -> None:
        _n, nidx, dim, inner, mode = (int(a) for a in args)
        if narrow is not None:
            out, upd = out.view(narrow), upd.view(narrow)
        v = _wrap(idx, dim, mode).reshape(-1, nidx, inner)
        o, c = _along(nidx, inner, idx)
        o, c = (np.broadcast_to(a, v.shape) for a in (o, c))
        keep = v >= 0
        where = (o[keep], v[keep], c[keep])
        values = upd.reshape(v.shape)[keep]
        dst = out.reshape(-1, dim, inner)
        with np.errstate(all="ignore"):
            if combine == 0:
                dst[where] = values  # of duplicates, numpy's last lands (a GPU: any one)
            else:
                (np.add, np.minimum, np.maximum)[combine - 1].at(dst, where, values)

    return twin


def _window_twin(big: np.ndarray, small: np.ndarray, start: np.ndarray, *args: Any) -> None:
    _n, lead = int(args[0]), int(args[1])
    b = [int(a) for a in args[2:8]]
    z = [int(a) for a in args[8:14]]
    write = int(args[14])
    starts = [0] * lead + [int(s) for s in start[: 6 - lead]]
    window = tuple(
        slice(s, s + zd)
        for s, zd in ((min(max(s, 0), bd - zd), zd) for s, bd, zd in zip(starts, b, z, strict=True))
    )
    if write:
        big.reshape(b)[window] = small.reshape(z)
    else:
        small.reshape(z)[...] = big.reshape(b)[window]


def _pad_twin(out: np.ndarray, x: np.ndarray, *args: Any) -> None:
    mode = int(args[1])
    xs = [int(a) for a in args[2:8]]
    ps = [int(a) for a in args[8:14]]
    os_ = [int(a) for a in args[14:20]]
    lo, hi = int(args[20]), int(args[21])
    src = x.reshape(xs)
    if mode == 0:
        raw = (lo | hi << 64).to_bytes(16, "little")[: out.dtype.itemsize]
        out[...] = np.frombuffer(raw, dtype=out.dtype)[0]
        inside = tuple(slice(p, p + d) for p, d in zip(ps, xs, strict=True))
        out.reshape(os_)[inside] = src
        return
    pads = [(p, o - d - p) for p, d, o in zip(ps, xs, os_, strict=True)]
    out.reshape(os_)[...] = np.pad(src, pads, mode="edge" if mode == 1 else "reflect")


# -- operands: tensors, or TensorOps run first -------------------------------------------
class _Lazy:
    """A ``TensorOp`` operand: its shape, dtype and device for the checks; it is consumed
    when the op is built (:func:`_op`) and runs first, in the op's execution context."""

    __slots__ = ("device", "dtype", "fused", "op", "shape")
    is_contiguous = True  # a new tensor

    def __init__(self, op: TensorOp) -> None:
        if op._consumed:
            op._take()  # raises OpConsumedError
        self.op = op
        self.fused: Fused | None = None  # (set by _fuse: computed where the kernel reads it)
        self.shape: Shape = op.shape
        self.dtype = op.dtype
        self.device = op._node.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return int(self.dtype.itemsize)


#: An operand as the checks see it.
Operand = Any  # Tensor | _Lazy


def _fuse(value: Operand, dtype: Any) -> Fused | None:
    """``value``'s expression where the kernel reading it elementwise computes it there
    (an elementwise TensorOp of ``dtype``, :mod:`.fused_operand`), else None: it runs
    first."""
    if not isinstance(value, _Lazy) or value.dtype != dtype:
        return None
    value.fused = fusable(value.op)
    return value.fused


def _run(ctx: ExecutionContext, value: Any) -> Any:
    """The tensor of an operand (a ``_Lazy`` runs here); other values as they are."""
    return value.op._enqueue(ctx).get() if isinstance(value, _Lazy) else value


def _check_x(x: Any, name: str, argument: str = "x") -> Operand:
    if isinstance(x, TensorOp):
        return _Lazy(x)
    if not isinstance(x, Tensor):
        raise ArgumentError(
            f"{name}: {argument} must be a cuasync.Tensor or TensorOp (upload arrays with "
            f"cuasync.from_host), got {type(x).__name__}"
        )
    return x


def _check_indices(indices: Any, x: Operand, name: str, argument: str = "indices") -> Operand:
    if isinstance(indices, TensorOp):
        indices = _Lazy(indices)
    if not isinstance(indices, (Tensor, _Lazy)):
        raise ArgumentError(
            f"{name}: {argument} must be a cuasync.Tensor of int32 or int64 (upload them "
            f"with cuasync.from_host), got {type(indices).__name__}"
        )
    if dtype_name(indices.dtype) not in ("int32", "int64"):
        raise DTypeError(
            f"{name}: {argument} must be int32 or int64, got {dtype_name(indices.dtype)}; "
            "convert them with .astype('int64')"
        )
    if indices.device is not x.device:
        raise InvalidDeviceError(f"{name}: {argument} are on another device than x")
    return indices


def _check_mode(mode: Any, allowed: tuple[str, ...], name: str, argument: str = "mode") -> str:
    if mode not in allowed:
        options = ", ".join(repr(m) for m in allowed)
        raise ArgumentError(f"{name}: {argument} must be one of {options}, got {mode!r}"[:300])
    return str(mode)


def _contiguous(ctx: ExecutionContext, t: Tensor, shape: Shape, dtype: Any, name: str) -> Tensor:
    """``t`` (broadcast to ``shape``, converted to ``dtype``) as a contiguous tensor: ``t``
    itself where it is one, else a kernel's copy."""
    if t.shape == shape and t.dtype == dtype and t.is_contiguous:
        return t
    copy = new_tensor(ctx, shape, np.dtype(dtype), name)
    if copy.size:
        kernel_copy(ctx, copy, broadcast_to(t, shape) if t.shape != shape else t)
    return copy


def _target(
    ctx: ExecutionContext, out: Tensor | None, shape: Shape, dtype: Any, name: str, *reads: Tensor
) -> Tensor:
    """Where a kernel writes the result: ``out`` where it is contiguous and overlaps
    nothing the kernel reads, else a new tensor (:func:`_deliver` copies it into ``out``)."""
    if out is not None and out.is_contiguous and not any(overlap(out, t) for t in reads):
        return out
    return new_tensor(ctx, shape, np.dtype(dtype), name)


def _deliver(ctx: ExecutionContext, result: Tensor, out: Tensor | None) -> Output[Tensor]:
    if out is None or result is out:
        return Output.ready(result)
    if out.size:
        _copy_into(ctx, out, result)
    return Output.ready(out)


def _op(
    name: str,
    enqueue: Callable[[ExecutionContext], Output[Tensor]],
    x: Operand,
    shape: Shape,
    out: Tensor | None,
    *operands: Any,
    kernels: tuple[Kernel, ...] = (),
    gathered: bool = True,
    fused: Callable[[Device], tuple[tuple[Any, Device], ...]] | None = None,
) -> TensorOp:
    """The op of ``enqueue``; the ``TensorOp`` operands among ``x`` and ``operands`` are
    consumed now (every check has passed: a refused call leaves them to the caller).

    Its first use (prepared off the event loop by an ``await``): the operands' own, then
    ``kernels`` (those ``enqueue`` launches) and the copy kernel of each operand tensor
    that is not contiguous (:func:`_contiguous` gathers it; not ``gathered``: copied
    with :func:`_copy_into`, a kernel gathers only a view the copy engines cannot read).
    A fused operand's first use is ``fused``'s (the kernel computing it where read)."""
    if x.device is None:
        raise ArgumentError(f"{name}: x has no device (a TensorOp of scalars only)")
    if out is not None:
        check_out(out, name, shape, x.dtype, x.device)
    for v in (x, *operands):
        if isinstance(v, _Lazy):
            v.op._take()
    lazy = [v.op for v in (x, *operands) if isinstance(v, _Lazy) and v.fused is None]
    copies = [
        copy_kernel(v.dtype)
        for v in (x, *operands)
        if isinstance(v, Tensor) and not (v.is_contiguous if gathered else memcpy_able(v))
    ]

    def first_use(on: Device) -> tuple[tuple[Any, Device], ...]:
        mine = unprepared((*kernels, *copies), on)
        ahead = fused(on) if fused is not None else ()
        return (*(pair for op in lazy for pair in op._first_use(on)), *ahead, *mine)

    pending = device_op(enqueue, x.device, name, first_use=first_use)
    pending._take()
    return TensorOp(Node("pending", name, shape, x.dtype, pending, device=x.device), out)


def _flat_bits(t: Tensor) -> Tensor:
    """A contiguous ``t`` as one dimension of the unsigned integers of its element size."""
    flat = Tensor(t.allocation, (t.size,), t.dtype, None, t.offset)
    return builtin.bit_view(flat, builtin.FILL_DTYPES[t.itemsize])


def _flat(t: Tensor) -> Tensor:
    return Tensor(t.allocation, (t.size,), t.dtype, None, t.offset)


# -- gather, take_along_axis --------------------------------------------------------------
def gather_kernel(itemsize: int, index: str, along: bool) -> Kernel:
    """``ca_gather`` (``ca_gather_along`` for ``along``) for elements of ``itemsize``
    bytes and ``index`` (int32/int64) indices."""
    family, twin = ("ca_gather_along", _gather_along_twin) if along else ("ca_gather", _gather_twin)
    return _KERNELS.kernel(f"{family}<{builtin.storage(itemsize)}, {_index_c(index)}>", twin)


def gather(
    x: Tensor | TensorOp,
    indices: Tensor | TensorOp,
    axis: int = 0,
    *,
    batch_dims: int = 0,
    mode: str = "wrap",
    out: Tensor | None = None,
) -> TensorOp:
    """Slices of ``x`` along ``axis`` at ``indices`` (int32/int64), one batch at a time:
    numpy's ``take`` with TensorFlow/JAX-style leading batch axes (not XLA's full
    dimension numbers).

    The first ``batch_dims`` axes of ``x`` and ``indices`` are batch axes (equal
    lengths); ``axis >= batch_dims``. The result has shape ``x.shape[:axis] +
    indices.shape[batch_dims:] + x.shape[axis + 1:]``, and for a batch position ``b``::

        out[b, p..., k..., c...] = x[b, p..., indices[b, k...], c...]

    ``batch_dims=0`` is ``take(x, indices, axis)``. An index out of range wraps
    (``mode="wrap"``, numpy's negative indices for ``-n..n-1``) or is clipped
    (``"clip"``).

    >>> rows = await cuasync.gather(x, idx, axis=1, batch_dims=1)  # x: (B, N, D), idx: (B, K)
    """
    name = "gather"
    x = _check_x(x, name)
    indices = _check_indices(indices, x, name)
    code = _INDEX_MODES[_check_mode(mode, ("wrap", "clip"), name)]
    if isinstance(batch_dims, bool) or not isinstance(batch_dims, (int, np.integer)):
        raise ArgumentError(f"{name}: batch_dims must be an int, got {batch_dims!r}"[:200])
    nb = int(batch_dims)
    if not 0 <= nb <= min(x.ndim - 1, indices.ndim):
        raise ShapeError(
            f"{name}: batch_dims={nb} must be in 0..{min(x.ndim - 1, indices.ndim)} for x of "
            f"shape {x.shape} and indices of shape {indices.shape}"
        )
    if x.ndim == 0:
        raise ShapeError(f"{name}: x is 0-d; it has no axis to gather along")
    ax = _axis(axis, x.ndim, name)
    if ax < nb:
        raise ShapeError(f"{name}: axis {ax} is a batch axis (batch_dims={nb}); it must be >= {nb}")
    if x.shape[:nb] != indices.shape[:nb]:
        raise ShapeError(
            f"{name}: the {nb} batch axes differ: x has shape {x.shape}, indices {indices.shape}"
        )
    dim = x.shape[ax]
    shape = (*x.shape[:ax], *indices.shape[nb:], *x.shape[ax + 1 :])
    if dim == 0 and 0 not in shape:
        raise ArgumentError(f"{name}: cannot gather indices from an empty axis (axis {ax})")
    pre = math.prod(x.shape[nb:ax])
    nidx = math.prod(indices.shape[nb:])
    inner = math.prod(x.shape[ax + 1 :])
    kernel = gather_kernel(x.dtype.itemsize, dtype_name(indices.dtype), False)
    fx = _fuse(x, x.dtype)
    s_c, i_c = builtin.storage(x.dtype.itemsize), _index_c(dtype_name(indices.dtype))
    call = Call(
        f"ca_gather_body<{s_c}, {i_c}>",
        (f"{s_c}* out", None, f"const {i_c}* idx", *_longs("n pre nidx dim inner"), "int mode"),
        s_c,
        _gather_twin,
    )

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        it = _run(ctx, indices)
        n = math.prod(shape)
        if fx is not None:  # x computed where the kernel reads it
            fk, reads, tail = fx.prepare(ctx, call, x.shape)
            result = _target(ctx, out, shape, x.dtype, name, *reads, it)
            if n:
                idx = _contiguous(ctx, it, it.shape, it.dtype, name)
                args = (n, pre, nidx, dim, inner, code, *tail)
                builtin.launch(
                    ctx, fk, n, _flat_bits(result), _flat(idx), *args, scoped=out is None
                )
            return _deliver(ctx, result, out)
        xt = _run(ctx, x)
        result = _target(ctx, out, shape, xt.dtype, name, xt, it)
        if n:
            src = _contiguous(ctx, xt, xt.shape, xt.dtype, name)
            idx = _contiguous(ctx, it, it.shape, it.dtype, name)
            args = (n, pre, nidx, dim, inner, code)
            builtin.launch(
                ctx,
                kernel,
                n,
                _flat_bits(result),
                _flat_bits(src),
                _flat(idx),
                *args,
                scoped=out is None,
            )
        return _deliver(ctx, result, out)

    if fx is None:
        return _op(name, enqueue, x, shape, out, indices, kernels=(kernel,))
    fused = functools.partial(fx.first_use, call, x.shape)
    return _op(name, enqueue, x, shape, out, indices, fused=fused)


def _along_shapes(
    x: Operand, indices: Operand, axis: int | None, name: str
) -> tuple[Shape, Shape, int]:
    """The shape of the (possibly flattened) ``x``, the iteration shape (x's and the indices' other
    axes broadcast, the indices' length along the axis) and the axis."""
    if axis is None:
        if indices.ndim != 1:
            raise ShapeError(
                f"{name}: with axis=None indices must be 1-d (x is flattened), got shape "
                f"{indices.shape}"
            )
        return (x.size,), indices.shape, 0
    if x.ndim == 0:
        raise ShapeError(f"{name}: x is 0-d; pass axis=None or a tensor with axes")
    ax = _axis(axis, x.ndim, name)
    if indices.ndim != x.ndim:
        raise ShapeError(
            f"{name}: indices must have as many dimensions as x ({x.ndim}), got shape "
            f"{indices.shape}; add axes of length 1 to broadcast them"
        )
    rest = []
    for d, (a, b) in enumerate(zip(x.shape, indices.shape, strict=True)):
        if d == ax:
            rest.append(b)
        elif a == b or b == 1 or a == 1:
            rest.append(max(a, b) if a and b else 0)
        else:
            raise ShapeError(
                f"{name}: indices of shape {indices.shape} do not broadcast against x of "
                f"shape {x.shape} (axis {d}: {b} vs {a}; the axis {ax} may differ)"
            )
    return x.shape, tuple(rest), ax


def take_along_axis(
    x: Tensor | TensorOp,
    indices: Tensor | TensorOp,
    axis: int | None = -1,
    *,
    mode: str = "wrap",
    out: Tensor | None = None,
) -> TensorOp:
    """Elements of ``x`` picked along ``axis`` by ``indices`` (int32/int64, as many axes
    as ``x``): numpy's ``take_along_axis`` (``torch.gather``).

    The other axes of ``x`` and ``indices`` broadcast; the result has their broadcast
    shape with ``indices.shape[axis]`` along ``axis``. ``axis=None`` takes from the
    flattened ``x`` with 1-d indices. numpy raises for an index out of range; a kernel
    cannot, so it wraps (``mode="wrap"``: ``-n..n-1`` as numpy, others modulo ``n``) or
    is clipped (``"clip"``).

    >>> top = await cuasync.take_along_axis(scores, order[:, :5], axis=1)
    """
    name = "take_along_axis"
    x = _check_x(x, name)
    indices = _check_indices(indices, x, name)
    code = _INDEX_MODES[_check_mode(mode, ("wrap", "clip"), name)]
    flat_shape, shape, ax = _along_shapes(x, indices, axis, name)
    dim = flat_shape[ax]
    if dim == 0 and 0 not in shape:
        raise ArgumentError(f"{name}: cannot take indices from an empty axis (axis {ax})")
    x_shape = (*shape[:ax], dim, *shape[ax + 1 :])
    nidx, inner = shape[ax], math.prod(shape[ax + 1 :])
    kernel = gather_kernel(x.dtype.itemsize, dtype_name(indices.dtype), True)
    fx = _fuse(x, x.dtype)
    s_c, i_c = builtin.storage(x.dtype.itemsize), _index_c(dtype_name(indices.dtype))
    call = Call(
        f"ca_gather_along_body<{s_c}, {i_c}>",
        (f"{s_c}* out", None, f"const {i_c}* idx", *_longs("n nidx dim inner"), "int mode"),
        s_c,
        _gather_along_twin,
    )
    # the fused x is read over x_shape (broadcast), or flattened: its own shape
    read_shape = x.shape if axis is None else x_shape

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        it = _run(ctx, indices)
        n = math.prod(shape)
        if fx is not None:  # x computed where the kernel reads it
            fk, reads, tail = fx.prepare(ctx, call, read_shape)
            result = _target(ctx, out, shape, x.dtype, name, *reads, it)
            if n:
                idx = _contiguous(ctx, it, shape, it.dtype, name)
                args = (n, nidx, dim, inner, code, *tail)
                builtin.launch(
                    ctx, fk, n, _flat_bits(result), _flat(idx), *args, scoped=out is None
                )
            return _deliver(ctx, result, out)
        xt = _run(ctx, x)
        result = _target(ctx, out, shape, xt.dtype, name, xt, it)
        if n:
            src = _contiguous(ctx, xt, xt.shape, xt.dtype, name)
            if axis is None:
                src = _flat(src)
            src = _contiguous(ctx, src, x_shape, xt.dtype, name)  # broadcast
            idx = _contiguous(ctx, it, shape, it.dtype, name)
            args = (n, nidx, dim, inner, code)
            builtin.launch(
                ctx,
                kernel,
                n,
                _flat_bits(result),
                _flat_bits(src),
                _flat(idx),
                *args,
                scoped=out is None,
            )
        return _deliver(ctx, result, out)

    broadcasts = [  # (the copies that broadcast x and the indices)
        copy_kernel(v.dtype)
        for v, to in ((x, x_shape), (indices, shape))
        if v.size != math.prod(to) and not (v is x and fx is not None)
    ]
    if fx is None:
        return _op(name, enqueue, x, shape, out, indices, kernels=(kernel, *broadcasts))
    fused = functools.partial(fx.first_use, call, read_shape)
    return _op(name, enqueue, x, shape, out, indices, kernels=tuple(broadcasts), fused=fused)


# -- scatter ------------------------------------------------------------------------------
def scatter_kernel(dtype: Any, index: str, mode: str) -> Kernel:
    """``ca_scatter`` for ``dtype``, ``index`` (int32/int64) indices and ``mode``."""
    combine = _SCATTER_MODES.index(mode)
    narrow = _NARROW.get(dtype_name(dtype))
    if combine and narrow is not None:
        expression = f"ca_scatter_narrow<{_index_c(index)}, {combine}, {narrow}>"
        return _KERNELS.kernel(expression, _scatter_twin(combine, dtype))
    c_type = builtin.storage(dtype.itemsize) if combine == 0 else DTYPES[dtype_name(dtype)].storage
    expression = f"ca_scatter<{c_type}, {_index_c(index)}, {combine}>"
    return _KERNELS.kernel(expression, _scatter_twin(combine, None))


def scatter(
    x: Tensor | TensorOp,
    indices: Tensor | TensorOp,
    updates: ValueOperand,
    axis: int | None = -1,
    *,
    mode: str = "set",
    index_mode: str = "wrap",
    out: Tensor | None = None,
) -> TensorOp:
    """A copy of ``x`` with ``updates`` written along ``axis`` at ``indices``: numpy's
    ``put_along_axis`` (``torch.scatter``/``scatter_add``), the inverse of
    :func:`take_along_axis`, returning a new tensor (or writing ``out=``; ``out=x``
    updates ``x`` in place).

    ``indices`` (int32/int64) has as many axes as ``x``, its other axes broadcasting
    against ``x``'s; ``updates`` (a tensor or a number, converted to ``x``'s dtype)
    broadcasts to the indices' broadcast shape. For each position ``(i, j, k)`` of it::

        out[i, indices[i, j, k], k] (op)= updates[i, j, k]

    ``mode``: ``"set"`` stores (of updates to one element, an unspecified one lands: on
    the emulator the last, on a GPU any); ``"add"``, ``"min"``, ``"max"`` combine every
    update, duplicates included, with the device's atomics (min/max as numpy's
    ``minimum``/``maximum``: a NaN wins). They take int32, uint32, int64, uint64,
    float16, bfloat16, float32 and float64 (``add`` complex64/128 too); others raise
    :class:`DTypeError`.
    The order of float additions is unspecified. ``index_mode``: an index out of range
    wraps (``"wrap"``, numpy's negative indices), is clipped (``"clip"``) or has its
    update dropped (``"drop"``, as XLA's scatter).

    >>> hist = await cuasync.scatter(cuasync.zeros(bins), ids, ones, axis=0, mode="add")
    """
    name = "scatter"
    x = _check_x(x, name)
    indices = _check_indices(indices, x, name)
    _check_mode(mode, _SCATTER_MODES, name)
    code = _INDEX_MODES[_check_mode(index_mode, tuple(_INDEX_MODES), name, "index_mode")]
    if mode != "set" and dtype_name(x.dtype) not in COMBINE_DTYPES[mode]:
        raise DTypeError(
            f"{name}: mode={mode!r} takes x of dtype {', '.join(COMBINE_DTYPES[mode])} (the "
            f"device's atomics), got {dtype_name(x.dtype)}; convert x (.astype) or use "
            "mode='set'"
        )
    flat_shape, shape, ax = _along_shapes(x, indices, axis, name)
    dim = flat_shape[ax]
    for d, (a, b) in enumerate(zip(flat_shape, shape, strict=True)):
        if d != ax and a != b:
            raise ShapeError(
                f"{name}: indices of shape {indices.shape} reach past x of shape {x.shape} "
                f"(axis {d}); they broadcast to x's other axes, not beyond them"
            )
    if dim == 0 and 0 not in shape:
        raise ArgumentError(f"{name}: cannot scatter into an empty axis (axis {ax})")
    upd = _updates(updates, x, shape, name)
    nidx, inner = shape[ax], math.prod(shape[ax + 1 :])
    kernel = scatter_kernel(x.dtype, dtype_name(indices.dtype), mode)
    in_place = _same_view(out, x)
    fu = _fuse(upd, x.dtype)
    call = _scatter_call(x.dtype, dtype_name(indices.dtype), mode)

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        xt, it = _run(ctx, x), _run(ctx, indices)
        if fu is not None:  # the updates computed where the kernel reads them
            fk, fused_reads, tail = fu.prepare(ctx, call, shape)
        else:
            ut = _run(ctx, upd)
            fused_reads = [ut] if isinstance(ut, Tensor) else []
        reads = (it, *fused_reads)
        result = _target(ctx, out, xt.shape, xt.dtype, name, *reads, *(() if in_place else (xt,)))
        if not (in_place and result is out) and result.size:
            _copy_into(ctx, result, xt)
        n = math.prod(shape)
        if n:
            idx = _contiguous(ctx, it, shape, it.dtype, name)
            flat = _flat_bits if mode == "set" else builtin.flat
            if fu is not None:
                builtin.launch(
                    ctx, fk, n, flat(result), _flat(idx), n, nidx, dim, inner, code, *tail
                )
                return _deliver(ctx, result, out)
            values = _updates_tensor(ctx, ut, xt, shape, name)
            views = (flat(result), _flat(idx), flat(values))
            builtin.launch(ctx, kernel, n, *views, n, nidx, dim, inner, code)
        return _deliver(ctx, result, out)

    values = (  # (the updates made a contiguous tensor of x's dtype: filled, or a copy)
        [_fill_kernel(x.dtype.itemsize)]
        if isinstance(upd, np.ndarray)
        else [copy_kernel(x.dtype)]
        if upd.shape != shape or upd.dtype != x.dtype
        else []
    )
    wide = [copy_kernel(indices.dtype)] if indices.shape != shape else []
    if fu is None:
        return _op(name, enqueue, x, x.shape, out, indices, upd, kernels=(kernel, *values, *wide))
    fused = functools.partial(fu.first_use, call, shape)
    return _op(name, enqueue, x, x.shape, out, indices, upd, kernels=tuple(wide), fused=fused)


def _scatter_call(dtype: Any, index: str, mode: str) -> Call:
    """:func:`scatter_kernel`'s body, as a kernel with fused updates calls it."""
    combine = _SCATTER_MODES.index(mode)
    narrow = _NARROW.get(dtype_name(dtype))
    i_c = _index_c(index)
    if combine and narrow is not None:
        body, t_c = f"ca_scatter_narrow_body<{i_c}, {combine}, {narrow}>", "unsigned short"
        twin = _scatter_twin(combine, dtype)
    else:
        t_c = builtin.storage(dtype.itemsize) if combine == 0 else DTYPES[dtype_name(dtype)].storage
        body, twin = f"ca_scatter_body<{t_c}, {i_c}, {combine}>", _scatter_twin(combine, None)
    params = (f"{t_c}* out", f"const {i_c}* idx", None, *_longs("n nidx dim inner"), "int mode")
    return Call(body, params, t_c, twin)


def _updates(updates: Any, x: Operand, shape: Shape, name: str) -> Any:
    """``updates`` checked: a tensor broadcasting to ``shape``, or a number as a 0-d array
    of ``x``'s dtype."""
    if isinstance(updates, TensorOp):
        updates = _Lazy(updates)
    if isinstance(updates, (Tensor, _Lazy)):
        if updates.device is not x.device:
            raise InvalidDeviceError(f"{name}: updates are on another device than x")
        try:
            np.broadcast_shapes(updates.shape, shape)
            ok = np.broadcast_shapes(updates.shape, shape) == shape
        except ValueError:
            ok = False
        if not ok:
            raise ShapeError(
                f"{name}: updates of shape {updates.shape} do not broadcast to the indices' "
                f"shape {shape}"
            )
        return updates
    if isinstance(updates, (bool, int, float, complex, np.number, np.bool_)):
        return _representable(updates, x.dtype, "updates")
    raise ArgumentError(
        f"{name}: updates must be a cuasync.Tensor or a number, got {type(updates).__name__}"
    )


def _updates_tensor(
    ctx: ExecutionContext, upd: Tensor | np.ndarray, x: Tensor, shape: Shape, name: str
) -> Tensor:
    if isinstance(upd, Tensor):
        return _contiguous(ctx, upd, shape, x.dtype, name)
    values = new_tensor(ctx, shape, x.dtype, name)
    _enqueue_fill(ctx, values, _bits(upd))
    return values


# -- dynamic_slice, dynamic_update_slice --------------------------------------------------
def window_kernel(itemsize: int, index: str) -> Kernel:
    """``ca_window`` for elements of ``itemsize`` bytes and ``index`` (int32/int64) starts."""
    return _KERNELS.kernel(
        f"ca_window<{builtin.storage(itemsize)}, {_index_c(index)}>", _window_twin
    )


def _starts(start_indices: Any, x: Operand, name: str) -> Any:
    """Python ints (one per axis of ``x``), or an int32/int64 device tensor of shape
    ``(x.ndim,)``, checked."""
    if isinstance(start_indices, (Tensor, TensorOp)):
        start = _check_indices(start_indices, x, name, "start_indices")
        if start.shape != (x.ndim,):
            raise ShapeError(
                f"{name}: start_indices must have shape ({x.ndim},), one start per axis of x, "
                f"got {start.shape}"
            )
        if x.ndim == 0:  # nothing to read: the window is x
            return ()
        if x.ndim > MAX_AXES:
            raise ShapeError(
                f"{name}: device start_indices take x of at most {MAX_AXES} axes, got "
                f"{x.ndim}; pass Python ints, or reshape x"
            )
        return start
    try:
        starts = tuple(operator.index(s) for s in start_indices)
    except TypeError:
        raise ArgumentError(
            f"{name}: start_indices must be a sequence of ints or an int32/int64 device "
            f"tensor of shape ({x.ndim},), got {start_indices!r}"[:300]
        ) from None
    if len(starts) != x.ndim:
        raise ShapeError(f"{name}: start_indices has {len(starts)} starts, x has {x.ndim} axes")
    return starts


def _window(
    start: Tensor | tuple[int, ...], x_shape: Shape, sizes: Shape
) -> tuple[slice, ...] | None:
    """The clamped window of host starts (None for device ones)."""
    if not isinstance(start, tuple):
        return None
    return tuple(
        slice(c, c + z)
        for c, z in (
            (min(max(s, 0), d - z), z) for s, d, z in zip(start, x_shape, sizes, strict=True)
        )
    )


def _launch_window(
    ctx: ExecutionContext, big: Tensor, small: Tensor, start: Tensor, write: int
) -> None:
    lead = MAX_AXES - big.ndim
    b = (1,) * lead + big.shape
    z = (1,) * lead + small.shape
    kernel = window_kernel(big.itemsize, dtype_name(start.dtype))
    n = small.size
    args = (_flat_bits(big), _flat_bits(small), _flat(start), n, lead, *b, *z, write)
    builtin.launch(ctx, kernel, n, *args)


def _window_call(dtype: Any, start: Any, write: int) -> Call:
    """``ca_window``'s body reading a fused ``big`` (``write`` 0) or ``small`` (1)."""
    s_c, i_c = builtin.storage(dtype.itemsize), _index_c(dtype_name(start.dtype))
    axes = _longs(" ".join(f"{c}{j}" for c in "bz" for j in range(MAX_AXES)))
    big, small = (None, f"{s_c}* small") if write == 0 else (f"{s_c}* big", None)
    params = (big, small, f"const {i_c}* start", "long long n", "int lead", *axes)
    return Call(
        f"ca_window_body<{write}, {i_c}>", params, s_c, functools.partial(_window_twin_w, write)
    )


def _window_twin_w(write: int, *args: Any) -> None:
    """:func:`_window_twin` as the fused kernels call it (``write`` fixed)."""
    _window_twin(*args, write)


def _fused_window(
    ctx: ExecutionContext,
    kernel: Kernel,
    bits: Tensor,
    big: Shape,
    small: Shape,
    start: Tensor,
    tail: list[Any],
) -> None:
    """Launch a fused window kernel: ``bits`` the tensor it writes (the window, or where
    the fused update goes), ``big`` and ``small`` the shapes."""
    lead = MAX_AXES - len(big)
    b, z = (1,) * lead + big, (1,) * lead + small
    n = math.prod(small)
    builtin.launch(ctx, kernel, n, _flat_bits(bits), _flat(start), n, lead, *b, *z, *tail)


def dynamic_slice(
    x: Tensor | TensorOp,
    start_indices: StartIndices,
    sizes: Sequence[IntLike],
    *,
    out: Tensor | None = None,
) -> TensorOp:
    """The window of ``x`` of shape ``sizes`` starting at ``start_indices``: XLA's
    ``DynamicSlice``.

    ``start_indices`` is one int per axis, or an int32/int64 device tensor of shape
    ``(x.ndim,)`` read by the kernel (nothing waits for the device; ``x`` of at most 6
    axes). Each start is clamped to ``[0, x.shape[d] - sizes[d]]`` as XLA clamps, so
    the window always lies inside ``x``.

    >>> row = await cuasync.dynamic_slice(cache, pos, (1, 64))   # pos: int64 (2,) on device
    """
    name = "dynamic_slice"
    x = _check_x(x, name)
    start = _starts(start_indices, x, name)
    shape = _sizes(sizes, x, name)
    window = _window(start, x.shape, shape)
    fx = _fuse(x, x.dtype)  # (host starts: the window of the expression, one kernel)

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        if fx is not None and window is not None:  # the expression over the window
            write, reads = fx.window(ctx, window)
            result = _target(ctx, out, shape, x.dtype, name, *reads)
            if result.size:
                write(result)
            return _deliver(ctx, result, out)
        if fx is not None:  # x computed where the window kernel reads it
            st = _run(ctx, start)
            fk, reads, tail = fx.prepare(ctx, _window_call(x.dtype, start, 0), x.shape)
            result = _target(ctx, out, shape, x.dtype, name, *reads, st)
            if result.size:
                _fused_window(ctx, fk, result, x.shape, shape, st, tail)
            return _deliver(ctx, result, out)
        xt, st = _run(ctx, x), _run(ctx, start)
        result = _target(ctx, out, shape, xt.dtype, name, xt, *_device(st))
        if result.size:
            if window is not None:  # host starts: a view of x, copied
                _copy_into(ctx, result, xt[window])
            else:
                src = _contiguous(ctx, xt, xt.shape, xt.dtype, name)
                _launch_window(ctx, src, result, _device(st)[0], 0)
        return _deliver(ctx, result, out)

    device_starts = (
        [] if window is not None else [window_kernel(x.dtype.itemsize, dtype_name(start.dtype))]
    )
    kernels = tuple(device_starts)
    if fx is not None and window is None:
        first = functools.partial(fx.first_use, _window_call(x.dtype, start, 0), x.shape)
        return _op(name, enqueue, x, shape, out, start, fused=first)
    if fx is not None:  # (its kernel is named when it runs: the window's layout)
        return _op(name, enqueue, x, shape, out, start, fused=lambda on: ())
    return _op(name, enqueue, x, shape, out, start, kernels=kernels, gathered=window is None)


def _device(start: Any) -> tuple[Tensor, ...]:
    """The device tensor of starts, as a tuple of it (empty for host starts)."""
    return () if isinstance(start, tuple) else (start,)


def _same_view(a: Tensor | None, b: Operand) -> bool:
    """Whether ``a`` is the very view ``b`` (an op given ``out=x`` works in place)."""
    if a is None or not isinstance(b, Tensor) or a.allocation is not b.allocation:
        return False
    return (a.ptr, a.shape, a.strides, a.dtype) == (b.ptr, b.shape, b.strides, b.dtype)


def _sizes(sizes: Any, x: Operand, name: str) -> Shape:
    try:
        shape = tuple(operator.index(z) for z in sizes)
    except TypeError:
        raise ArgumentError(
            f"{name}: sizes must be a sequence of ints, one per axis of x, got {sizes!r}"[:300]
        ) from None
    if len(shape) != x.ndim or any(not 0 <= z <= d for z, d in zip(shape, x.shape, strict=True)):
        raise ShapeError(
            f"{name}: sizes={shape} must give each of x's {x.ndim} axes a length in "
            f"0..x.shape[d] (x has shape {x.shape})"
        )
    return shape


def dynamic_update_slice(
    x: Tensor | TensorOp,
    update: Tensor | TensorOp,
    start_indices: StartIndices,
    *,
    out: Tensor | None = None,
) -> TensorOp:
    """A copy of ``x`` with ``update`` written over the window at ``start_indices``:
    XLA's ``DynamicUpdateSlice`` (``out=x`` writes ``x`` in place: a KV-cache update).

    ``update`` has as many axes as ``x``, each no longer than ``x``'s, and is converted
    to ``x``'s dtype. ``start_indices`` is one int per axis or an int32/int64 device
    tensor of shape ``(x.ndim,)`` read by the kernel (nothing waits for the device;
    ``x`` of at most 6 axes); each start is clamped to ``[0, x.shape[d] -
    update.shape[d]]`` as XLA clamps.

    >>> await cuasync.dynamic_update_slice(cache, row, pos, out=cache)
    """
    name = "dynamic_update_slice"
    x = _check_x(x, name)
    update = _check_x(update, name, "update")
    if update.device is not x.device:
        raise InvalidDeviceError(f"{name}: update is on another device than x")
    start = _starts(start_indices, x, name)
    if update.ndim != x.ndim or any(u > d for u, d in zip(update.shape, x.shape, strict=True)):
        raise ShapeError(
            f"{name}: update of shape {update.shape} must have x's {x.ndim} axes, each no "
            f"longer than x's (x has shape {x.shape})"
        )
    window = _window(start, x.shape, update.shape)
    in_place = _same_view(out, x)
    fu = _fuse(update, x.dtype)

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        if fu is not None and window is not None:  # the update's kernel writes the window
            xt = _run(ctx, x)
            write, fused_reads = fu.window(ctx, tuple(slice(0, d) for d in update.shape))
            reads = (*fused_reads, *(() if in_place else (xt,)))
            result = _target(ctx, out, xt.shape, xt.dtype, name, *reads)
            if not (in_place and result is out) and result.size:
                _copy_into(ctx, result, xt)
            if update.size:
                write(result[window])
            return _deliver(ctx, result, out)
        if fu is not None:  # the update computed where the window kernel reads it
            xt, st = _run(ctx, x), _run(ctx, start)
            call = _window_call(x.dtype, start, 1)
            fk, fused_reads, tail = fu.prepare(ctx, call, update.shape)
            reads = (*fused_reads, st, *(() if in_place else (xt,)))
            result = _target(ctx, out, xt.shape, xt.dtype, name, *reads)
            if not (in_place and result is out) and result.size:
                _copy_into(ctx, result, xt)
            if update.size:
                _fused_window(ctx, fk, result, xt.shape, update.shape, st, tail)
            return _deliver(ctx, result, out)
        xt, ut, st = _run(ctx, x), _run(ctx, update), _run(ctx, start)
        reads = (ut, *_device(st), *(() if in_place else (xt,)))
        result = _target(ctx, out, xt.shape, xt.dtype, name, *reads)
        if not (in_place and result is out) and result.size:
            _copy_into(ctx, result, xt)
        if ut.size:
            if window is not None:
                _copy_into(ctx, result[window], ut)
            else:
                small = _contiguous(ctx, ut, ut.shape, xt.dtype, name)
                _launch_window(ctx, result, small, _device(st)[0], 1)
        return _deliver(ctx, result, out)

    device_starts = (
        [] if window is not None else [window_kernel(x.dtype.itemsize, dtype_name(start.dtype))]
    )
    converts = [copy_kernel(x.dtype)] if update.dtype != x.dtype else []
    kernels = (*device_starts, *converts)
    gathered = window is None
    if fu is not None and window is None:
        first = functools.partial(fu.first_use, _window_call(x.dtype, start, 1), update.shape)
        return _op(name, enqueue, x, x.shape, out, update, start, gathered=False, fused=first)
    if fu is not None:  # (its kernel is named when it runs: the window's layout)
        return _op(
            name, enqueue, x, x.shape, out, update, start, gathered=False, fused=lambda on: ()
        )
    return _op(name, enqueue, x, x.shape, out, update, start, kernels=kernels, gathered=gathered)


# -- pad ----------------------------------------------------------------------------------
_PAD_MODES = {"constant": 0, "edge": 1, "reflect": 2}


def pad_kernel(itemsize: int) -> Kernel:
    """``ca_pad`` for elements of ``itemsize`` bytes."""
    return _KERNELS.kernel(f"ca_pad<{builtin.storage(itemsize)}>", _pad_twin)


def _pad_width(pad_width: Any, ndim: int, name: str) -> tuple[tuple[int, int], ...]:
    """numpy's ``pad_width`` forms (``n``, ``(n,)``, ``(before, after)``, or one pair
    per axis) as one ``(before, after)`` pair per axis."""
    try:
        arr = np.asarray(pad_width)
        if arr.dtype.kind not in "iu" or arr.ndim > 2:
            raise TypeError
        pairs = np.broadcast_to(arr.reshape(arr.shape or (1,)) if arr.ndim < 2 else arr, (ndim, 2))
    except (TypeError, ValueError):
        raise ArgumentError(
            f"{name}: pad_width must be an int, a (before, after) pair or one pair per axis "
            f"({ndim}), got {pad_width!r}"[:300]
        ) from None
    if (pairs < 0).any():
        raise ArgumentError(f"{name}: pad_width must not be negative, got {pad_width!r}"[:300])
    return tuple((int(a), int(b)) for a, b in pairs)


def pad(
    x: Tensor | TensorOp,
    pad_width: PadWidth,
    mode: str = "constant",
    *,
    constant_values: complex | np.number[Any] | np.bool_ = 0,
    out: Tensor | None = None,
) -> TensorOp:
    """``x`` with ``pad_width`` elements added before and after each axis: numpy's
    ``pad`` for the modes ``"constant"`` (``constant_values``, one number), ``"edge"``
    and ``"reflect"`` (about the edge element, which is not repeated; padding wider
    than the axis keeps reflecting, as numpy). ``x`` of at most 6 axes.

    >>> p = await cuasync.pad(img, ((0, 0), (2, 2), (2, 2)), mode="reflect")
    """
    name = "pad"
    x = _check_x(x, name)
    code = _PAD_MODES[_check_mode(mode, tuple(_PAD_MODES), name)]
    if x.ndim > MAX_AXES:
        raise ShapeError(f"{name}: x has {x.ndim} axes; pad takes at most {MAX_AXES}")
    widths = _pad_width(pad_width, x.ndim, name)
    shape = tuple(d + a + b for d, (a, b) in zip(x.shape, widths, strict=True))
    for d, (dim, (a, b)) in enumerate(zip(x.shape, widths, strict=True)):
        if code and dim == 0 and (a or b):
            raise ShapeError(
                f"{name}: axis {d} of x is empty; mode={mode!r} cannot extend it (use "
                "mode='constant')"
            )
    bits = (
        _bits(_representable(constant_values, x.dtype, "constant_values")) if code == 0 else (0, 0)
    )
    lead = MAX_AXES - x.ndim
    xs = (1,) * lead + x.shape
    ps = (0,) * lead + tuple(a for a, _ in widths)
    os_ = (1,) * lead + shape
    kernel = pad_kernel(x.dtype.itemsize)
    if out is None and type(x) is Tensor and x.size and x.is_contiguous:  # (one launch: the
        n = math.prod(shape)  # core's raw launch)
        view = SUPPORTED[builtin.FILL_DTYPES[x.itemsize]]
        tail = (_flat_bits(x), n, code, *xs, *ps, *os_, *bits)
        return one_launch(kernel, x.device, name, shape, x.dtype, (n,), view, n, tail)
    fx = _fuse(x, x.dtype) if x.size else None  # (an empty x: all padding, nothing read)
    s_c = builtin.storage(x.dtype.itemsize)
    axes = " ".join(f"{c}{j}" for c in "xpo" for j in range(MAX_AXES))
    call = Call(
        f"ca_pad_body<{s_c}>",
        (
            f"{s_c}* out",
            None,
            "long long n",
            "int mode",
            *_longs(axes),
            *_longs("lo hi", "unsigned "),
        ),
        s_c,
        _pad_twin,
    )

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        if fx is not None:  # x computed where the kernel reads it
            fk, reads, tail = fx.prepare(ctx, call, x.shape)
            result = _target(ctx, out, shape, x.dtype, name, *reads)
            args = (result.size, code, *xs, *ps, *os_, *bits, *tail)
            builtin.launch(ctx, fk, result.size, _flat_bits(result), *args, scoped=out is None)
            return _deliver(ctx, result, out)
        xt = _run(ctx, x)
        result = _target(ctx, out, shape, xt.dtype, name, xt)
        n = result.size
        if n and not xt.size:  # nothing to copy from: all of it is padding (constant)
            _enqueue_fill(ctx, result, bits)
        elif n:
            src = _contiguous(ctx, xt, xt.shape, xt.dtype, name)
            args = (n, code, *xs, *ps, *os_, *bits)
            builtin.launch(
                ctx, kernel, n, _flat_bits(result), _flat_bits(src), *args, scoped=out is None
            )
        return _deliver(ctx, result, out)

    filled = kernel if x.size else _fill_kernel(x.dtype.itemsize)  # (an empty x: all padding)
    if fx is None:
        return _op(name, enqueue, x, shape, out, kernels=(filled,))
    return _op(name, enqueue, x, shape, out, fused=functools.partial(fx.first_use, call, x.shape))


def indexing_kernels() -> list[Kernel]:
    """Every kernel instantiation of this family (for compile checks)."""

    found: list[Kernel] = []
    for itemsize in builtin.FILL_DTYPES:
        found.append(pad_kernel(itemsize))
        for index in ("int32", "int64"):
            found += [gather_kernel(itemsize, index, along) for along in (False, True)]
            found.append(window_kernel(itemsize, index))
            found.append(scatter_kernel(SUPPORTED[builtin.FILL_DTYPES[itemsize]], index, "set"))
    for mode, names in COMBINE_DTYPES.items():
        for name in names:
            found += [scatter_kernel(SUPPORTED[name], index, mode) for index in ("int32", "int64")]
    return found
