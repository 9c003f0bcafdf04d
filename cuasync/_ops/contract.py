"""Contractions: ``matmul`` (and ``@``), ``tensordot`` and ``dot_general``, as BLAS GEMMs.

Each returns a :class:`~cuasync.TensorOp` whose shape, dtype and device are checked
when it is built; when it runs, ``gemm`` (the sibling module) turns the operands into
batches of matrices and the backend runs the products on the op's stream: cuBLAS on a
GPU, numpy on the emulator.

>>> c = await (a @ b)                                          # numpy's matmul rules
>>> c = await cuasync.matmul(a, b, precision="tf32")           # float32 on tensor cores
>>> await cuasync.matmul(a, b, out=c, beta=1.0)                # c += a @ b
>>> d = await cuasync.dot_general(x, y, contracting=((2,), (1,)), batch=((0,), (0,)))
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .._cancel_var import SCOPE
from .._core.context import ExecutionContext
from .._core.device import Device, Stream
from .._core.op import DeviceOp, device_op
from .._core.output import Output
from .._dtypes import DTYPES as ALL_DTYPES
from .._dtypes import as_dtype, dtype_name
from .._first_use import CUBLAS, unprepared
from .._launch.library_call import library_call
from .._tensor import Shape, Tensor, contiguous_strides, overlap
from .._transfers.device_copy import copy_kernel, kernel_copy, new_tensor
from ..errors import AliasingError, ArgumentError, DTypeError, InvalidDeviceError, ShapeError
from . import operators, tiled_gemm
from .elementwise import check_out, tensors_read
from .gemm import (
    broadcast_to,
    calls,
    copy_into,
    fix,
    gemm,
    gemm_call,
    group,
    one_call,
    regroup,
    view,
)
from .launch_plan import LAUNCHES, new_tensor_on
from .seen import remember
from .tensorop import TensorOp, tensor_op

#: An axis, or a sequence of axes (numpy's integers too).
AxesLike = int | np.integer[Any] | Sequence[int | np.integer[Any]]
#: ``(a's axes, b's axes)``: ``dot_general``'s ``contracting`` and ``batch``.
AxesPair = Sequence[AxesLike]
#: ``tensordot``'s ``axes``: a count of axes, or ``(a's axes, b's axes)``.
TensordotAxes = int | np.integer[Any] | AxesPair
#: ``alpha`` and ``beta``: a Python or numpy number.
Scale = float | complex | np.number[Any]

__all__ = ["dot_general", "matmul", "tensordot"]

#: The dtypes contractions take (integers wrap around, as numpy's).
DTYPES = tuple(name for name, d in ALL_DTYPES.items() if d.arithmetic and name != "bool")
PRECISIONS = ("highest", "tf32")
_INT_MAX = 2**31 - 1

Operand = Tensor | TensorOp


def is_operand(value: Any) -> bool:
    """Whether ``@`` takes ``value`` (else it returns NotImplemented)."""
    return isinstance(value, (Tensor, TensorOp))


# -- checks, when the op is built ---------------------------------------------------------
def _check_operand(x: Any, argument: str, fn: str) -> Operand:
    if isinstance(x, TensorOp):
        if x._consumed:
            x._take()  # raises OpConsumedError
        return x
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        raise ArgumentError(f"{fn}: {argument} is a numpy array; upload it first: from_host")
    raise ArgumentError(
        f"{fn}: {argument} must be a cuasync.Tensor or a TensorOp, got {type(x).__name__}"
    )


def _common(fn: str, a: Operand, b: Operand) -> tuple[np.dtype[Any], Device]:
    for x, arg in ((a, "a"), (b, "b")):
        if dtype_name(x.dtype) not in DTYPES:
            raise DTypeError(
                f"{fn}: {arg} has dtype {dtype_name(x.dtype)}; contractions take "
                f"{', '.join(DTYPES)} (convert it first: cuasync.convert)"
            )
    # mixed dtypes: the array API's promotion (numpy's result_type; float32 and float64
    # make float64, bfloat16 and float16 float32), each operand converted when it runs
    dtype = a.dtype if a.dtype == b.dtype else as_dtype(np.result_type(a.dtype, b.dtype))
    if a.device is not b.device:
        raise InvalidDeviceError(
            f"{fn}: a lives on device {_ordinal(a.device)}, b on device {_ordinal(b.device)}"
        )
    assert a.device is not None
    return dtype, a.device


def _promoted(ctx: ExecutionContext, t: Tensor, dtype: np.dtype[Any], fn: str) -> Tensor:
    """``t``, or a contiguous copy of it in ``dtype`` where its own differs (mixed
    operands: the product is computed in their promoted dtype)."""
    if t.dtype == dtype:
        return t
    converted = new_tensor(ctx, t.shape, dtype, f"{fn} operand")
    if t.size:
        kernel_copy(ctx, converted, t)
    return converted


def _ordinal(d: Device | None) -> Any:
    return d.ordinal if d is not None else "?"


def _check_rest(
    fn: str,
    shape: Shape,
    dtype: np.dtype[Any],
    device: Device,
    operands: tuple[Operand, Operand],
    out: Any,
    alpha: Any,
    beta: Any,
    precision: Any,
) -> tuple[complex, complex]:
    if precision not in PRECISIONS:
        raise ArgumentError(f"{fn}: precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "tf32" and dtype_name(dtype) not in ("float32", "complex64"):
        raise ArgumentError(
            f"{fn}: precision='tf32' is for float32 and complex64, not {dtype_name(dtype)}"
        )
    scalars = []
    for name, v in (("alpha", alpha), ("beta", beta)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, complex, np.number)):
            raise ArgumentError(f"{fn}: {name} must be a number, got {type(v).__name__}")
        if isinstance(v, (complex, np.complexfloating)) and dtype.kind != "c":
            raise DTypeError(f"{fn}: {name}={v} is complex but the operands are real")
        if dtype.kind in "iu" and not float(complex(v).real).is_integer():
            raise DTypeError(
                f"{fn}: {name}={v} is not an integer but the operands are "
                f"{dtype_name(dtype)}; pass an integer (or convert the operands to a float)"
            )
        scalars.append(complex(v))
    if scalars[1] != 0 and out is None:
        raise ArgumentError(f"{fn}: beta={beta} accumulates into out=; pass out")
    if out is not None:
        check_out(out, fn, shape, dtype, device)
        for x, arg in zip(operands, ("a", "b"), strict=True):
            if any(overlap(out, t) for t in tensors_read(x)):
                raise AliasingError(
                    f"{fn}: out overlaps {arg}; a product cannot be written over its input "
                    "(write into a new tensor, then copy)"
                )
    return scalars[0], scalars[1]


def _axes(axes: Any, ndim: int, fn: str, argument: str) -> tuple[int, ...]:
    try:
        found = tuple(_index(a) for a in axes)
    except TypeError:
        raise ArgumentError(
            f"{fn}: {argument} must be a sequence of axis numbers, got {axes!r}"
        ) from None
    norm = tuple(a + ndim if a < 0 else a for a in found)
    if any(not 0 <= a < ndim for a in norm):
        raise ShapeError(f"{fn}: {argument}={found} is out of range for {ndim} axes")
    if len(set(norm)) != len(norm):
        raise ShapeError(f"{fn}: {argument}={found} names an axis twice")
    return norm


def _index(v: Any) -> int:
    if isinstance(v, (bool, np.bool_)):
        raise TypeError("bool is not an axis")
    return operator.index(v)


def _pair(value: Any, fn: str, argument: str) -> tuple[Any, Any]:
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2:
        raise ArgumentError(f"{fn}: {argument} must be a pair (a's axes, b's axes), got {value!r}")
    return value[0], value[1]


# -- building the op ------------------------------------------------------------------------
#: ``views(ctx, ta, tb, tc)``: the ``(*batch, m, k)`` and ``(*batch, k, n)`` views of the
#: operands and ``(*batch, m, n)`` of the result ``tc``, or None for the result when its
#: axes do not group (it is then computed into a contiguous copy).
Views = Any


def _build(
    fn: str,
    operands: tuple[Operand, Operand],
    shape: Shape,
    dtype: np.dtype[Any],
    device: Device,
    out: Tensor | None,
    views: Views,
    scalars: tuple[complex, complex],
    precision: str,
    contracted: int,
    seen: tuple[Any, ...] | None = None,
) -> TensorOp:
    """The op of a contraction, checked; ``contracted``: the length of its sums (``k``);
    ``seen``: the key its kind is recorded as (in :data:`_SEEN`) once it has run as one
    GEMM of its operands (:func:`_record`)."""
    a, b = operands
    alpha, beta = scalars
    inputs = [a] if a is b else [a, b]
    for x in inputs:
        if isinstance(x, TensorOp):
            x._take()

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        resolved = [x._enqueue(ctx).get() if isinstance(x, TensorOp) else x for x in inputs]
        ta, tb = (_promoted(ctx, t, dtype, fn) for t in (resolved[0], resolved[-1]))
        tc = out if out is not None else new_tensor(ctx, shape, dtype, fn)
        if tc.size == 0:
            return Output.ready(tc)
        va, vb, vc = views(ctx, ta, tb, tc)
        if vc is not None:
            if seen is not None:  # (the operands themselves: a converted one is not)
                _record(seen, fn, (resolved[0], resolved[-1], tc), (va, vb, vc), scalars, precision)
            gemm(ctx, va, vb, vc, alpha, beta, precision, skippable=out is None)
            return Output.ready(tc)
        staged = new_tensor(ctx, tc.shape, dtype, f"{fn} result")
        if beta != 0:
            copy_into(ctx, staged, tc)
        va, vb, vc = views(ctx, ta, tb, staged)
        gemm(ctx, va, vb, vc, alpha, beta, precision)
        copy_into(ctx, tc, staged)
        return Output.ready(tc)

    kernels: list[Any] = [copy_kernel(dtype) for x in inputs if x.dtype != dtype]  # (_promoted's)
    macs = math.prod(shape) * contracted
    tiled = dtype.kind in "iu" or tiled_gemm.takes(dtype, macs, contracted, precision)
    if tiled:
        kernels.append(tiled_gemm.kernel(dtype_name(dtype)))  # (int8 may take cuBLAS instead)
    if not tiled or dtype_name(dtype) == "int8":
        kernels.append(CUBLAS)

    def first_use(on: Device) -> tuple[tuple[Any, Device], ...]:
        first = [pair for x in inputs if isinstance(x, TensorOp) for pair in x._first_use(on)]
        return (*first, *unprepared(kernels, on))

    op = device_op(enqueue, device, fn, graph_node=out is not None, first_use=first_use)
    return tensor_op(op, shape, dtype, out)  # (out: what it will output, declared)


# -- seen products: one GEMM of the operands' views --------------------------------------------
class _Seen(NamedTuple):
    """A product of a seen kind (:data:`_SEEN`): its name, the result's ``shape``,
    (contiguous) ``strides``, ``dtype`` and size in bytes, the checked ``beta`` and
    precision, and the one GEMM it is (:func:`~.gemm.one_call`): each of its views of
    ``a``, ``b`` and the new result as (shape, strides, its offset past the tensor's),
    and the ``flops`` a cancelled scope weighs before skipping it. A small float product
    is a launch of the tiled kernel (:mod:`.tiled_gemm`), ``tiled``; the others, None,
    are cuBLAS's."""

    fn: str
    shape: Shape
    strides: Shape
    dtype: np.dtype[Any]
    nbytes: int
    beta: complex
    precision: str
    views: tuple[tuple[Shape, Shape, int], ...]
    flops: int
    tiled: tiled_gemm.SeenLaunch | None


#: Products of two tensors into a new one that are one GEMM of their views, by what
#: decides that (``_seen_key``): a seen one is built and enqueued with no more checks
#: or layout work (:class:`_SeenProduct`); its first run, the long way, records it.
_SEEN: dict[tuple[Any, ...], _Seen] = {}


def _seen_key(a: Any, b: Any, alpha: Any, beta: Any, precision: Any) -> tuple[Any, ...] | None:
    """The key of a product of the tensors ``a`` and ``b`` into a new tensor, or None
    (another kind of operand: never recorded). ``alpha`` enters by its type only (what
    its checks look at for the float and complex products recorded: its value is taken
    per product), ``beta`` by its value and type (0: a new result takes no other)."""
    if type(a) is not Tensor or type(b) is not Tensor:
        return None
    scalars = (type(alpha), beta, type(beta), precision)
    return (a.dtype, a.shape, a.strides, b.dtype, b.shape, b.strides, *scalars)


def _record(
    key: tuple[Any, ...],
    fn: str,
    tensors: tuple[Tensor, Tensor, Tensor],
    views: tuple[Tensor, Tensor, Tensor],
    scalars: tuple[complex, complex],
    precision: str,
) -> None:
    """Record ``key``'s kind where its run is one GEMM of views of the operands and the
    new result themselves (not converted, not copied)."""
    one = one_call(*views)
    if one is None or any(
        v.allocation is not t.allocation or v.dtype != t.dtype
        for v, t in zip(one, tensors, strict=True)
    ):
        return
    result = tensors[2]
    k = one[0].shape[2]
    macs = math.prod(one[2].shape) * k
    made = tuple(
        (v.shape, v.strides, v.offset - t.offset) for v, t in zip(one, tensors, strict=True)
    )
    tiled = None
    if tiled_gemm.takes(result.dtype, macs, k, precision):
        if any(past for _, _, past in made):  # (its launch takes the tensors themselves)
            return
        tiled = tiled_gemm.seen_launch(*one)
    seen = _Seen(
        fn,
        result.shape,
        contiguous_strides(result.shape),
        result.dtype,
        result.size * result.itemsize,
        scalars[1],
        precision,
        made,
        8 * macs,  # (gemm's for a new result: skippable)
        tiled,
    )
    remember(_SEEN, key, seen)


class _SeenProduct(DeviceOp[Tensor]):
    """A product of a seen kind (:class:`_Seen`) of the tensors ``a`` and ``b``: a new
    result and the one GEMM of their views."""

    __slots__ = ("_a", "_alpha", "_b", "_name", "_seen")

    def __init__(self, seen: _Seen, a: Tensor, b: Tensor, alpha: complex) -> None:
        super().__init__(a.device)
        self._seen, self._a, self._b, self._alpha, self._name = seen, a, b, alpha, seen.fn

    def _trace_name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"<cuasync.DeviceOp {self._name}{' (consumed)' if self._consumed else ''}>"

    def _first_use(self, on: Device) -> Sequence[tuple[Any, Device]]:
        tiled = self._seen.tiled
        return unprepared([CUBLAS if tiled is None else tiled.kernel], on)

    def _enqueue(self, ctx: ExecutionContext) -> Output[Tensor]:
        seen = self._seen
        tc = new_tensor(ctx, seen.shape, seen.dtype, seen.fn)
        views = _views(self, tc)
        if seen.tiled is not None:
            tiled_gemm.launch(ctx, *views, self._alpha, seen.beta, scoped=True)
        else:
            calls(ctx, [views], self._alpha, seen.beta, seen.precision, seen.flops)
        return Output.ready(tc)


def _views(product: _SeenProduct, tc: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The views of a seen product's ``a``, ``b`` and new result ``tc`` its one GEMM takes."""
    seen = product._seen
    dtype = seen.dtype
    (sa, ta, pa), (sb, tb, pb), (sc, tc_, pc) = seen.views  # (shape, strides, offset past)
    a, b = product._a, product._b
    return (
        Tensor(a._alloc, sa, dtype, ta, a.offset + pa),
        Tensor(b._alloc, sb, dtype, tb, b.offset + pb),
        Tensor(tc._alloc, sc, dtype, tc_, tc.offset + pc),
    )


#: A seen product's GEMM reads ``a`` and ``b`` and writes the result.
_WRITES_RESULT = (False, False, True)


def _product_launch(product: _SeenProduct, stream: Stream) -> Any:
    """The launch op of a seen product on ``stream`` (the native core's maker of a
    TensorOp wrapping one, ``ExpressLaunches.pending_launches``): a new result, and the
    tiled kernel's launch (:func:`_tiled_launch`) or the backend's GEMM of the views as a
    library call the core submits as it submits a kernel launch. None (the long way)
    inside a cancel scope for a library call (the long way guards the call where the
    backend can) or before cuBLAS is loaded for the device."""
    device = stream.device
    seen = product._seen
    if seen.tiled is not None:
        return _tiled_launch(product, device, stream)
    if SCOPE.get() is not None or device.ordinal not in CUBLAS._prepared:
        return None
    tc = new_tensor_on(stream, seen.nbytes, seen.shape, seen.dtype, seen.strides)
    views = _views(product, tc)
    args = (*views, product._alpha, seen.beta, seen.precision)
    return library_call(gemm_call(device.ordinal), device, args, views, _WRITES_RESULT, tc, seen)


def _tiled_launch(product: _SeenProduct, device: Device, stream: Stream) -> Any:
    """The launch op of a small float product: the tiled kernel's one launch into a new
    result (:func:`.tiled_gemm.launch_op`), or None (the long way): the kernel not
    prepared for the device yet, an ``alpha`` it does not take as it is."""
    seen = product._seen
    tiled = seen.tiled
    assert tiled is not None
    alpha = product._alpha.real
    if device.ordinal not in tiled.kernel._prepared or not tiled_gemm.takes_alpha(tiled, alpha):
        return None
    tc = new_tensor_on(stream, seen.nbytes, seen.shape, seen.dtype, seen.strides)
    # (the tensors themselves: a seen kind's views start where they do, _record's check)
    operands = (tc, product._a, product._b)
    return tiled_gemm.launch_op(tiled, device, operands, alpha, seen.beta.real, tc)


LAUNCHES.pending_launches[_SeenProduct] = _product_launch


def _seen_product(key: tuple[Any, ...] | None, a: Any, b: Any, alpha: Any) -> TensorOp | None:
    """The op of a product of a seen kind (``key``: :func:`_seen_key`'s) of ``a`` and ``b``
    on one device, times ``alpha``, or None (not seen: the long way checks and runs it)."""
    try:
        seen = None if key is None else _SEEN.get(key)
    except TypeError:  # (an unhashable argument: the long way words it)
        return None
    if seen is None or a.device is not b.device:
        return None
    return tensor_op(_SeenProduct(seen, a, b, complex(alpha)), seen.shape, seen.dtype)


# -- the public functions ---------------------------------------------------------------------
def matmul(
    a: Operand,
    b: Operand,
    *,
    out: Tensor | None = None,
    alpha: Scale = 1.0,
    beta: Scale = 0.0,
    precision: str = "highest",
) -> TensorOp:
    """The matrix product with numpy's rules (``a @ b``): batch axes broadcast, a 1-D
    ``a`` is a row and a 1-D ``b`` a column (the added axis is removed from the result).

    ``out=`` writes into a tensor of the result's shape and dtype; ``beta`` accumulates
    into it (``out = alpha * a @ b + beta * out``). ``precision="tf32"`` lets float32
    products round their inputs to TF32 on tensor cores (about 10 bits); the default
    ``"highest"`` computes in full float32. float16 and bfloat16 accumulate in float32.

    >>> c = await cuasync.matmul(a, b)                      # (.., m, k) @ (.., k, n)
    >>> await cuasync.matmul(a, b, out=c, beta=1.0)         # c += a @ b
    """
    fn = "matmul"
    key = None if out is not None else _seen_key(a, b, alpha, beta, precision)
    found = _seen_product(key, a, b, alpha)
    if found is not None:
        return found
    a = _check_operand(a, "a", fn)
    b = _check_operand(b, "b", fn)
    dtype, device = _common(fn, a, b)
    if a.ndim == 0 or b.ndim == 0:
        which = "a" if a.ndim == 0 else "b"
        raise ShapeError(f"{fn}: {which} is 0-d; use multiply for scalars")
    ash = a.shape if a.ndim >= 2 else (1, *a.shape)
    bsh = b.shape if b.ndim >= 2 else (*b.shape, 1)
    if ash[-1] != bsh[-2]:
        raise ShapeError(
            f"{fn}: a has shape {a.shape} and b {b.shape}: a's last axis ({ash[-1]}) must "
            f"match b's {'only' if b.ndim == 1 else 'second-to-last'} axis ({bsh[-2]})"
        )
    try:
        batch = tuple(np.broadcast_shapes(ash[:-2], bsh[:-2]))
    except ValueError:
        raise ShapeError(
            f"{fn}: the batch axes of a {a.shape} and b {b.shape} do not broadcast"
        ) from None
    m, k, n = ash[-2], ash[-1], bsh[-1]
    shape = batch + ((m,) if a.ndim >= 2 else ()) + ((n,) if b.ndim >= 2 else ())
    _check_sizes(fn, (m, k), (1,), (0,), (k, n), (1,))
    scalars = _check_rest(fn, shape, dtype, device, (a, b), out, alpha, beta, precision)
    a1, b1 = a.ndim == 1, b.ndim == 1

    def views(
        ctx: ExecutionContext, ta: Tensor, tb: Tensor, tc: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        if a1:
            ta = view(ta, (1, k), (0, ta.strides[0]))
        if b1:
            tb = view(tb, (k, 1), (tb.strides[0], 0))
        cshape, cstrides = list(tc.shape), list(tc.strides)
        if a1:
            cshape.insert(len(batch), 1)
            cstrides.insert(len(batch), 0)
        if b1:
            cshape.append(1)
            cstrides.append(0)
        vc = view(tc, tuple(cshape), tuple(cstrides))
        va = broadcast_to(fix(ctx, ta, "a"), batch)
        vb = broadcast_to(fix(ctx, tb, "b"), batch)
        return va, vb, vc

    return _build(fn, (a, b), shape, dtype, device, out, views, scalars, precision, k, key)


def dot_general(
    a: Operand,
    b: Operand,
    *,
    contracting: AxesPair,
    batch: AxesPair = ((), ()),
    out: Tensor | None = None,
    alpha: Scale = 1.0,
    beta: Scale = 0.0,
    precision: str = "highest",
) -> TensorOp:
    """Contract the axes ``contracting[0]`` of ``a`` with ``contracting[1]`` of ``b``,
    pairing the batch axes ``batch[0]`` of ``a`` with ``batch[1]`` of ``b`` (equal
    sizes, no broadcasting), as XLA's ``dot_general``. The result's axes are the batch
    axes, then ``a``'s other axes, then ``b``'s. ``out``, ``alpha``, ``beta`` and
    ``precision`` as in :func:`matmul`.

    >>> # (B, M, K) x (B, K, N) -> (B, M, N)
    >>> c = await cuasync.dot_general(x, y, contracting=((2,), (1,)), batch=((0,), (0,)))
    """
    fn = "dot_general"
    a = _check_operand(a, "a", fn)
    b = _check_operand(b, "b", fn)
    dtype, device = _common(fn, a, b)
    c0, c1 = _pair(contracting, fn, "contracting")
    b0, b1 = _pair(batch, fn, "batch")
    ca, cb = _axes(c0, a.ndim, fn, "contracting[0]"), _axes(c1, b.ndim, fn, "contracting[1]")
    ba, bb = _axes(b0, a.ndim, fn, "batch[0]"), _axes(b1, b.ndim, fn, "batch[1]")
    return _dot(fn, a, b, ca, cb, ba, bb, dtype, device, out, alpha, beta, precision)


def tensordot(
    a: Operand,
    b: Operand,
    axes: TensordotAxes = 2,
    *,
    out: Tensor | None = None,
    alpha: Scale = 1.0,
    beta: Scale = 0.0,
    precision: str = "highest",
) -> TensorOp:
    """``numpy.tensordot``: ``axes=N`` contracts the last N axes of ``a`` with the first
    N of ``b``; ``axes=(a_axes, b_axes)`` names them. The result has ``a``'s remaining
    axes, then ``b``'s. ``out``, ``alpha``, ``beta``, ``precision`` as in :func:`matmul`.

    >>> c = await cuasync.tensordot(x, y, axes=([1, 2], [0, 1]))
    """
    fn = "tensordot"
    a = _check_operand(a, "a", fn)
    b = _check_operand(b, "b", fn)
    dtype, device = _common(fn, a, b)
    if isinstance(axes, (int, np.integer)) and not isinstance(axes, (bool, np.bool_)):
        count = int(axes)
        if not 0 <= count <= min(a.ndim, b.ndim):
            raise ShapeError(
                f"{fn}: axes={count} must be between 0 and {min(a.ndim, b.ndim)} for shapes "
                f"{a.shape} and {b.shape}"
            )
        ca = tuple(range(a.ndim - count, a.ndim))
        cb = tuple(range(count))
    else:
        x, y = _pair(axes, fn, "axes")
        x = (x,) if isinstance(x, (int, np.integer)) else x
        y = (y,) if isinstance(y, (int, np.integer)) else y
        ca, cb = _axes(x, a.ndim, fn, "axes[0]"), _axes(y, b.ndim, fn, "axes[1]")
    return _dot(fn, a, b, ca, cb, (), (), dtype, device, out, alpha, beta, precision)


def _dot(
    fn: str,
    a: Operand,
    b: Operand,
    ca: tuple[int, ...],
    cb: tuple[int, ...],
    ba: tuple[int, ...],
    bb: tuple[int, ...],
    dtype: np.dtype[Any],
    device: Device,
    out: Tensor | None,
    alpha: Any,
    beta: Any,
    precision: str,
) -> TensorOp:
    argument = "axes" if fn == "tensordot" else "contracting"
    for name, (x, y) in ((argument, (ca, cb)), ("batch", (ba, bb))):
        if len(x) != len(y):
            raise ShapeError(f"{fn}: {name} pairs {len(x)} axes of a with {len(y)} of b")
        sx, sy = tuple(a.shape[i] for i in x), tuple(b.shape[i] for i in y)
        if sx != sy:
            raise ShapeError(f"{fn}: {name} axes have sizes {sx} in a but {sy} in b")
    if set(ca) & set(ba) or set(cb) & set(bb):
        raise ShapeError(f"{fn}: an axis is both contracting and batch")
    fa = tuple(i for i in range(a.ndim) if i not in ca and i not in ba)
    fb = tuple(i for i in range(b.ndim) if i not in cb and i not in bb)
    shape = (
        tuple(a.shape[i] for i in ba)
        + tuple(a.shape[i] for i in fa)
        + tuple(b.shape[i] for i in fb)
    )
    _check_sizes(fn, a.shape, ca, fa, b.shape, fb)
    scalars = _check_rest(fn, shape, dtype, device, (a, b), out, alpha, beta, precision)
    nb = len(ba)
    ones = [1] * nb
    out_groups = [
        *((i,) for i in range(nb)),
        tuple(range(nb, nb + len(fa))),
        tuple(range(nb + len(fa), len(shape))),
    ]

    def views(
        ctx: ExecutionContext, ta: Tensor, tb: Tensor, tc: Tensor
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        va = regroup(ctx, ta, ba + fa + ca, [*ones, len(fa), len(ca)])
        vb = regroup(ctx, tb, bb + cb + fb, [*ones, len(cb), len(fb)])
        return va, vb, group(tc, out_groups)

    contracted = math.prod(a.shape[i] for i in ca)
    return _build(fn, (a, b), shape, dtype, device, out, views, scalars, precision, contracted)


def _check_sizes(
    fn: str, sa: Shape, ca: tuple[int, ...], fa: tuple[int, ...], sb: Shape, fb: tuple[int, ...]
) -> None:
    for name, v in (
        ("k", math.prod(sa[i] for i in ca)),
        ("m", math.prod(sa[i] for i in fa)),
        ("n", math.prod(sb[i] for i in fb)),
    ):
        if v > _INT_MAX:
            raise ShapeError(f"{fn}: the product's {name}={v} exceeds the 32-bit limit of BLAS")


# ``a @ b`` on a Tensor or TensorOp calls these (see operators.Implementation).
operators.implementation.is_matmul_operand = is_operand
operators.implementation.matmul = matmul
