"""Reductions: ``sum``, ``prod``, ``max``, ``min``, ``mean``, ``argmax``, ``argmin``, ``vdot``.

numpy's semantics: ``axis`` is None (every axis), an int or a tuple of ints (argmax and
argmin: None or an int), ``keepdims`` keeps reduced axes as length 1, ``dtype`` (sum,
prod, mean) is the dtype computed in and returned; integer sums and products of small
integers are int64 (uint64 when unsigned), means of integers float32 (the default float
dtype; accumulated in float64). An elementwise
``TensorOp`` operand is fused into the reduction's loads: ``cuasync.sum(a * b)`` is one
kernel and allocates nothing but its result. bfloat16 and complex tensors reduce too:
float16 and bfloat16 accumulate in float32 and round once; complex max/min/argmax/argmin
order as numpy does (real part, then imaginary part; NaN wins).

>>> s = await cuasync.sum(x)                         # a 0-d tensor
>>> m = await cuasync.max(x, axis=(0, 2), keepdims=True)
>>> i = await cuasync.argmax(x, axis=-1)             # int64 indices
>>> d = await cuasync.vdot(a, b)                     # sum(conj(a) * b), one kernel
>>> c = await cuasync.max(z)                         # complex: numpy's lexicographic order
"""

from __future__ import annotations

import builtins
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .._axes import Axes
from .._backends import get_backend
from .._core.context import ExecutionContext
from .._core.device import Device
from .._core.output import Output
from .._dtypes import (
    DEFAULT_FLOAT,
    STORAGE_ONLY,
    DTypeLike,
    as_dtype,
    dtype_name,
    storage_only_message,
)
from .._first_use import unprepared
from .._launch import builtin
from .._launch.kernel import NULL_POINTER, Kernel
from .._native import NATIVE, ReduceWorkCore
from .._tensor import Shape, Tensor, contiguous_strides, overlap
from .._transfers.copies import memcpy
from .._transfers.device_copy import new_tensor
from ..errors import ArgumentError, DTypeError, InvalidDeviceError, ShapeError
from . import elementwise
from .codegen import _WEAK_C, make_plan, scalar_arg, scalar_specs
from .expr import DTYPES as ELEMENTWISE_DTYPES
from .expr import Node
from .launch_plan import LAUNCHES, LaunchPlan, broadcast_strides, merge_axes, plan_key, record_plan
from .on_output import on_tensor
from .reduce_codegen import (
    ARG_OPS,
    FLOAT4_OPS,
    ReduceSpec,
    float4_kernel,
    kernel_for,
    row_vector_width,
)
from .seen import remember
from .tensorop import (
    TensorOp,
    _resolve_pending,
    first_uses,
    flattened,
    leaf,
    planned,
    tensor_op,
)

__all__ = ["argmax", "argmin", "max", "mean", "min", "norm", "prod", "sum", "vdot"]

#: The dtypes reductions take: the elementwise ones, bfloat16 (accumulated in float32,
#: rounded once) and complex.
DTYPES = ELEMENTWISE_DTYPES | {"bfloat16", "complex64", "complex128"}
_NARROW = ("float16", "bfloat16")  # accumulated in float32

_BLOCK = 256
#: Blocks that keep an H200 (132 SMs, 5 to 8 blocks of 256 each, by the kernel's
#: registers) busy two to three times over: the last wave is a small part.
_TARGET_BLOCKS = 2048
_MAX_SPLITS = 2048
#: Rows a block of the column layout (mode 1) covers: a warp's loads, along the kept axis.
_COLUMNS = 32


def normalize_axes(axis: Any, ndim: int, name: str, allow_tuple: bool = True) -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple of ints; negative counts from the end) as
    sorted axes, or an :class:`~cuasync.errors.ArgumentError` naming ``axis``.

    >>> normalize_axes((-1, 0), 3, "sum")
    (0, 2)
    """
    if axis is None:
        return tuple(range(ndim))
    items = axis if isinstance(axis, tuple) and allow_tuple else (axis,)
    found: list[int] = []
    for a in items:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            what = "an int or a tuple of ints" if allow_tuple else "an int"
            raise ArgumentError(f"{name}: axis must be None or {what}, got {axis!r}"[:200])
        if not -ndim <= a < ndim:
            raise ArgumentError(f"{name}: axis {a} is out of range for a {ndim}-d tensor")
        a = int(a) % ndim
        if a in found:
            raise ArgumentError(f"{name}: axis {axis!r} repeats axis {a}")
        found.append(a)
    return tuple(sorted(found))


def check_dtype(dt: np.dtype[Any], argument: str, name: str) -> None:
    """A DTypeError unless reductions take ``dt``; FP8's says to convert first."""
    if dtype_name(dt) in STORAGE_ONLY:
        raise DTypeError(f"{name}: " + storage_only_message(argument, dt, "reductions"))
    if dtype_name(dt) not in DTYPES:
        raise DTypeError(
            f"{name}: {argument} has dtype {dtype_name(dt)}, which reductions do not take; "
            f"they take {', '.join(sorted(DTYPES))}"
        )


def _accumulator(res: np.dtype[Any]) -> str:
    return "float32" if dtype_name(res) in _NARROW else dtype_name(res)


def _result_dtypes(op: str, x: np.dtype[Any], dtype: Any, name: str) -> tuple[str, str]:
    """(result dtype, accumulator dtype) names, as numpy picks them (float16 and
    bfloat16 accumulate in float32), but the mean and norm of integers and bools are
    the default float dtype, float32, accumulated in float64."""
    if op in ARG_OPS:
        return "int64", _accumulator(x)
    if op in ("max", "min"):
        return dtype_name(x), _accumulator(x)
    if dtype is not None:
        res = as_dtype(dtype)
        check_dtype(res, "dtype", name)
        if op == "mean" and res.kind == "b":
            raise DTypeError(f"{name}: dtype=bool is not a dtype a mean can be computed in")
        if x.kind == "c" and res.kind != "c":
            raise DTypeError(
                f"{name}: x is {dtype_name(x)} and dtype={dtype_name(res)} is real, which would "
                "drop the imaginary parts (numpy warns and drops them); pass a complex dtype, "
                f"or convert x first: x.astype('{dtype_name(res)}') keeps the real parts"
            )
    elif op in ("sum", "prod") and (x.kind == "b" or (x.kind in "iu" and x.itemsize < 8)):
        res = np.dtype(np.uint64 if x.kind == "u" else np.int64)
    elif op in ("mean", "norm") and x.kind in "biu":
        # the default float dtype (float32), accumulated in float64 (numpy's: float64)
        return DEFAULT_FLOAT, "float64"
    elif op == "norm" and x.kind == "c":  # |x| is real: float32 / float64
        res = np.dtype(np.float32 if x == np.complex64 else np.float64)
    else:
        res = x
    return dtype_name(res), _accumulator(res)


def _reduce_op(
    name: str, op: str, x: Any, axis: Any, dtype: Any, out: Tensor | None, keepdims: bool
) -> TensorOp:
    """:data:`reduce_op`'s long way: checked, worded, resolved and recorded in
    :data:`_RESOLVED` (what the native builder finds again)."""
    if isinstance(x, TensorOp) and x._consumed:
        x._take()  # raises OpConsumedError
    if not isinstance(x, (Tensor, TensorOp)):
        if isinstance(x, np.ndarray):
            raise ArgumentError(
                f"{name}: x is a numpy array; upload it first: await cuasync.from_host(array)"
            )
        raise ArgumentError(
            f"{name}: x must be a cuasync.Tensor or TensorOp, got {type(x).__name__}"
        )
    # (what the arguments decide, checked once: keepdims=1 and axis=True are not keepdims=True
    # and axis=1, so each one's type is part of the key; an axis list is not hashable)
    key = (name, op, x.dtype, x.shape, axis, type(axis), dtype, keepdims, type(keepdims))
    try:
        known = _RESOLVED.get(key)
    except TypeError:
        known = None
    if known is None:
        known = _resolve(name, op, x, axis, dtype, keepdims)
        try:
            remember(_RESOLVED, key, known, REDUCE.memo)
        except TypeError:
            pass
    spec, axes, shape, dt, strides = known
    if out is not None:
        elementwise.check_out(out, name, shape, dt, x.device)
        if _reads_into(out, x):
            return _through_new(name, op, x, axis, dtype, out, keepdims)
        strides = out.strides
    node = _leaf(x, "x")  # consumes a TensorOp: fused into the loads when elementwise
    work = _Reduction(name, node, spec, axes, keepdims, out, shape, dt, strides)
    pending = Node("pending", name, shape, dt, work, device=node.device)
    return elementwise.APPLY.tensor_op(pending, out)


def _reads_into(out: Tensor, x: Tensor | TensorOp) -> bool:
    """Whether ``out`` shares memory with a tensor the reduction of ``x`` reads: a block
    could read elements another block has written (the very same view too: ``t`` of
    ``sum(m + t, axis=1, out=t)`` is read whole by every row)."""
    return any(overlap(out, t) for t in elementwise.tensors_read(x))


def _through_new(
    name: str, op: str, x: Any, axis: Any, dtype: Any, out: Tensor, keepdims: bool
) -> TensorOp:
    """The reduction into a new tensor, then copied into ``out`` (in one submission), as
    numpy does where ``out`` overlaps what it reads (``sum(x, axis=1, out=x[0])``). It
    writes ``out``, so it runs whole inside a cancelled scope, as any ``out=`` op."""
    reduced = _reduce_op(name, op, x, axis, dtype, None, keepdims)

    def into_out(t: Tensor) -> TensorOp:
        return tensor_op(memcpy(out, t), out.shape, out.dtype, out, writes=True)

    return on_tensor(reduced, name, out.shape, out.dtype, into_out, output=out, writes=True)


def _resolve(
    name: str, op: str, x: Tensor | TensorOp, axis: Any, dtype: Any, keepdims: Any
) -> tuple[ReduceSpec, tuple[int, ...], Shape, np.dtype[Any], Shape]:
    """What :func:`reduce_op`'s arguments decide, checked: the spec, the reduced axes, the
    result's shape, dtype and strides (a new tensor's)."""
    check_dtype(x.dtype, "x", name)
    if not isinstance(keepdims, (bool, np.bool_)):
        raise ArgumentError(f"{name}: keepdims must be a bool, got {keepdims!r}"[:200])
    axes = normalize_axes(axis, len(x.shape), name, allow_tuple=op not in ARG_OPS)
    res, acc = _result_dtypes(op, x.dtype, dtype, name)
    k = math.prod(x.shape[a] for a in axes)
    if k == 0 and op in ("max", "min", *ARG_OPS):
        raise ArgumentError(
            f"{name}: the reduced axes of x (shape {x.shape}) are empty, and {op} of no "
            "elements is not defined"
        )
    shape = tuple(1 if j in axes else d for j, d in enumerate(x.shape) if keepdims or j not in axes)
    return ReduceSpec(op, acc, res), axes, shape, np.dtype(res), contiguous_strides(shape)


#: :func:`_resolve`'s answers by the arguments that decide them (see :func:`reduce_op`).
_RESOLVED: dict[
    tuple[Any, ...], tuple[ReduceSpec, tuple[int, ...], Shape, np.dtype[Any], Shape]
] = {}


class _Reduction(ReduceWorkCore):
    """A reduction's work, the pending value of its ``TensorOp``: enqueued the long way
    (:meth:`_enqueue`), or, where it is one launch of the generic kernel, launched by the
    native core from its plan (``express_launch``, which reads the native base's fields:
    the tree, the plan key's rest, out=, the output's strides and shape). The native
    builder (:data:`reduce_op`) sets the fields ``__init__`` sets."""

    __slots__ = ()  # its fields are the native base's (``ReduceWorkCore``)

    def __init__(
        self,
        name: str,
        node: Node,
        spec: ReduceSpec,
        axes: tuple[int, ...],
        keepdims: bool,
        out: Tensor | None,
        shape: Shape,
        dtype: np.dtype[Any],
        strides: Shape,
    ) -> None:
        self._node = node
        self._key = (spec, axes, keepdims)  # (what the reduction is: its plan key's rest)
        self._out = out
        self._strides = strides  # (the output's: out's, or a new tensor's)
        self._shape = shape
        self._name = name
        self._dtype = dtype

    def __repr__(self) -> str:
        return f"<cuasync reduction {self._name}>"

    def _enqueue(self, ctx: ExecutionContext) -> Output[Tensor]:
        out = self._out
        result = out if out is not None else new_tensor(ctx, self._shape, self._dtype, self._name)
        if result.size:
            spec, axes, keepdims = self._key
            _launch(ctx, _resolve_pending(self._node, ctx), spec, axes, result, keepdims)
        return Output.ready(result)

    def _first_use(self, on: Device) -> tuple[tuple[Any, Device], ...]:
        if math.prod(self._shape) == 0:
            return ()
        (spec, axes, keepdims), strides = self._key, self._strides
        try:
            found = _generic_layout(self._node, spec, axes, strides, keepdims)
            return unprepared([found[0].kernel], on)
        except ValueError:  # pending operands: they run first, their kernels come first
            standin, pending = planned(self._node)
        try:
            found = _generic_layout(standin, spec, axes, strides, keepdims)
        except ValueError:
            return ()
        return (*first_uses(pending, on), *unprepared([found[0].kernel], on))


#: ``reduce_op(name, op, x, axis=None, *, dtype=None, out=None, keepdims=False)``: the
#: ``TensorOp`` reducing ``x`` (a tensor or TensorOp) with ``op`` over ``axis``. Native
#: (``ReduceApply``, ``reactor/python/reduce.c``) for a tensor reduced into a new tensor
#: with arguments seen before; else :func:`_reduce_op`.
#:
#: >>> s = reduce_op("sum", "sum", x, None, keepdims=True)
REDUCE = NATIVE.ReduceApply(elementwise.APPLY, _RESOLVED, _reduce_op, _Reduction)
reduce_op: Callable[..., TensorOp] = REDUCE.reduce_op


def _reduce_plan_for(
    work: _Reduction, _: None, key: tuple[Any, ...], tensors: list[Tensor]
) -> LaunchPlan | None:
    """The launch plan of a reduction's layout not seen before (``key``: its tree's
    ``plan_key`` and its own), made and recorded: the generic kernel's one launch, its
    workspace the null pointer; None (recorded too) where the layout is not one launch
    (split rows: a workspace zeroed first, partials combined after; a float4 kernel may
    take it) or has no elements: the long way runs it."""
    shape, strides = work._shape, work._strides
    plan: LaunchPlan | None = None
    if math.prod(shape) != 0:
        spec, axes, keepdims = work._key
        layout = _generic_layout(work._node, spec, axes, strides, keepdims)[0]
        if not layout.by_element.partials and not layout.float4:
            plan = _one_launch(layout, spec, work._dtype, shape, strides, tensors)
    return record_plan(key, plan)


def _one_launch(
    layout: _GenericLayout,
    spec: ReduceSpec,
    dtype: np.dtype[Any],
    shape: Shape,
    strides: Shape,
    tensors: list[Tensor],
) -> LaunchPlan:
    """The :class:`LaunchPlan` of ``layout``'s one launch writing ``shape`` and ``strides``:
    rows read in vectors where the first operand's rows are aligned for them (the layout
    decides the strides, the pointer is checked per launch, as :func:`vector_rows`)."""
    kernel, element, vector = layout.kernel, layout.by_element, layout.by_vector
    if vector is not None and not vector_strides(layout.kept, layout.reduced, layout.width):
        vector = None
    dtypes = [dtype, *(t.dtype for t in tensors)]
    first = tensors[0].itemsize * layout.width
    return LaunchPlan(
        kernel=kernel,
        vec_launch=None if vector is None else kernel[vector.grids[0], _BLOCK3],
        launch=kernel[element.grids[0], _BLOCK3],
        dtype=dtype,
        nbytes=math.prod(shape) * dtype.itemsize,
        specs=layout.specs,
        bits=any(builtin.BIT_DTYPES.get(dtype_name(dt)) for dt in dtypes),
        aligns=(1, first, *(1 for _ in tensors[1:])),
        nulls=2 if spec.op in ARG_OPS else 1,
        tail=(*element.sizes, 0, *element.dims),
        vec_tail=None if vector is None else (*vector.sizes, 0, *vector.dims),
        itemsizes=tuple(dt.itemsize for dt in dtypes),
        strides=strides,
    )


LAUNCHES.reduce_plan_for = _reduce_plan_for


#: A launch's block.
_BLOCK3 = (_BLOCK, 1, 1)


#: A reduction's layout worked out (:func:`_work_out`): its plan, tensors and scalars, the
#: kept axes' merged dimensions and strides (the output's first), the reduced axes' and
#: the kernel.
_Layout = tuple[
    Any, list[Tensor], list[Any], Shape, tuple[Shape, ...], Shape, tuple[Shape, ...], Kernel
]


def _leaf(x: Tensor | TensorOp, argument: str) -> Node:
    """The node of a reduction's operand (its dtype checked: :func:`check_dtype`); a
    tensor of any dtype reductions take (bfloat16 and complex too: elementwise ops do not
    take them) is loaded as it is."""
    if isinstance(x, Tensor):
        return Node("tensor", argument, x.shape, x.dtype, x, device=x.device)
    return leaf(x, argument)


def _splits(m: int, k: int, per_split: int, rows_in_flight: int) -> int:
    if k == 0:
        return 1
    want = -(-_TARGET_BLOCKS // builtins.max(rows_in_flight, 1))
    return builtins.max(1, builtins.min(want, -(-k // per_split), _MAX_SPLITS))


def _work_out(
    node: Node, spec: ReduceSpec, axes: tuple[int, ...], strides: Shape, keepdims: bool
) -> _Layout:
    """A reduction's layout (:data:`_Layout`) worked out from the tree; a pending leaf
    raises ``ValueError`` (it runs first)."""
    plan, tensors, scalars = make_plan(node)
    shape = node.shape
    kept = [j for j in range(len(shape)) if j not in axes]
    out_strides = [strides[j] for j in kept] if keepdims else list(strides)
    loads = [broadcast_strides(t, shape) for t in tensors]
    kdims, kstr = merge_axes(
        tuple(shape[j] for j in kept),
        [tuple(out_strides), *(tuple(s[j] for j in kept) for s in loads)],
    )
    rdims, rstr = merge_axes(
        tuple(shape[j] for j in axes), [tuple(s[j] for j in axes) for s in loads]
    )
    kernel = kernel_for(plan, spec, len(kdims), len(rdims))
    return plan, tensors, scalars, kdims, tuple(kstr), rdims, tuple(rstr), kernel


class _Launches(NamedTuple):
    """The generic kernel's launches for one layout and output: ``grids`` (a second one,
    where the rows are split, combines the partials), the output's view (before the
    workspace), the arguments after the workspace (``rest``: the operands' views, the
    scalars), those before the phase (``sizes``), those after it (``dims``: the mode,
    the dimensions and strides) and the workspace's elements (``partials``, 0: none)."""

    grids: tuple[tuple[int, int, int], ...]
    out_view: Tensor
    rest: list[Any]
    sizes: tuple[int, ...]
    dims: tuple[int, ...]
    partials: int


class _GenericLayout(NamedTuple):
    """What the generic kernel's launches of one layout are, without its operands: the
    ``kernel``, its ``plan`` and the ``merged`` dimensions (kdims, kstr, rdims, rstr),
    its geometries reading elements one by one and rows in vectors of ``width``
    (``by_element``, ``by_vector``: None, none), the operands' view (``dims`` and each
    one's ``strides``; the first one's ``kept`` and ``reduced`` strides decide the
    vectors), the output's view (``out_dims``, ``out_strides``), the scalars' ``specs``
    (None: passed as they are) and whether a float4 kernel may take it (``float4``: the
    pointers decide)."""

    kernel: Kernel
    plan: Any
    merged: tuple[Shape, tuple[Shape, ...], Shape, tuple[Shape, ...]]
    by_element: _Geometry
    by_vector: _Geometry | None
    width: int
    dims: Shape
    strides: list[Shape]
    kept: Shape
    reduced: Shape
    out_dims: Shape
    out_strides: Shape
    specs: tuple[str, ...] | None
    float4: bool


def _generic_layout(
    node: Node,
    spec: ReduceSpec,
    axes: tuple[int, ...],
    strides: Shape,
    keepdims: bool,
) -> tuple[_GenericLayout, list[Tensor], list[Any]]:
    """The :class:`_GenericLayout` of reducing ``node`` into an output of ``strides``,
    with its tensors and scalars; kept per seen layout (:data:`_GENERIC`, keyed by the
    tree's native ``plan_key`` and the reduction's). A leaf ``plan_key`` does not take
    (a stand-in) is worked out each time. A pending leaf raises ``ValueError`` (it runs
    first)."""
    walked = plan_key(node, strides)
    if walked is None:
        worked = _work_out(node, spec, axes, strides, keepdims)
        return _make_generic(spec, worked), worked[1], worked[2]
    key, tensors, scalars = walked
    key = (key, spec, axes, keepdims)
    layout = _GENERIC.get(key)
    if layout is None:
        worked = _work_out(node, spec, axes, strides, keepdims)
        layout = remember(_GENERIC, key, _make_generic(spec, worked))  # (no leaf kept)
    return layout, tensors, scalars


def _make_generic(spec: ReduceSpec, worked: _Layout) -> _GenericLayout:
    """The :class:`_GenericLayout` of a layout :func:`_work_out` worked out."""
    plan, _, _, kdims, kstr, rdims, rstr, kernel = worked
    by_element, by_vector, width = _geometries(plan, kdims, kstr, rdims, rstr)
    specs = scalar_specs(plan)
    return _GenericLayout(
        kernel=kernel,
        plan=plan,
        merged=(kdims, kstr, rdims, rstr),
        by_element=by_element,
        by_vector=by_vector,
        width=width,
        dims=kdims + rdims,
        strides=[ks + rs for ks, rs in zip(kstr[1:], rstr, strict=True)],
        kept=kstr[1],
        reduced=rstr[0],
        out_dims=kdims,
        out_strides=kstr[0],
        specs=None if all(s in _WEAK_C for s in specs) else specs,  # (weak: as they are)
        float4=_float4_kind(plan, spec, 0, 0, kdims, kstr, rdims, rstr) is not None,
    )


#: :func:`_generic_layout`'s layouts, without the leaves (no tensor is kept alive).
_GENERIC: dict[tuple[Any, ...], _GenericLayout] = {}


def _generic(
    layout: _GenericLayout, tensors: list[Tensor], scalars: list[Any], result: Tensor
) -> _Launches:
    """How the generic reduction kernel runs ``layout`` into ``result`` (see
    :class:`_Launches`): the geometry reading rows in vectors where the first operand's
    rows are aligned to them (:func:`vector_rows`)."""
    dims = layout.dims
    views = [
        builtin.storage_view(Tensor(t.allocation, dims, t.dtype, s, t.offset))
        for t, s in zip(tensors, layout.strides, strict=True)
    ]
    g = layout.by_element
    vec = layout.by_vector
    if vec is not None and vector_rows(views[0], layout.kept, layout.reduced, layout.width):
        g = vec
    out_view = builtin.storage_view(
        Tensor(result.allocation, layout.out_dims, result.dtype, layout.out_strides, result.offset)
    )
    specs = layout.specs
    if specs is not None:
        scalars = [scalar_arg(v, s) for v, s in zip(scalars, specs, strict=True)]
    return _Launches(g.grids, out_view, [*views, *scalars], g.sizes, g.dims, g.partials)


class _Geometry(NamedTuple):
    """The generic kernel's grids and size arguments for one layout (:class:`_Launches`)."""

    grids: tuple[tuple[int, int, int], ...]
    sizes: tuple[int, ...]
    dims: tuple[int, ...]
    partials: int


@functools.lru_cache(maxsize=4096)
def _geometries(
    plan: Any, kdims: Shape, kstr: tuple[Shape, ...], rdims: Shape, rstr: tuple[Shape, ...]
) -> tuple[_Geometry, _Geometry | None, int]:
    """A layout's geometry reading elements one by one, the one reading rows in vectors
    of ``width`` elements (None: no vector kernel for it), and ``width``; which one runs
    is :func:`vector_rows`'s to say, per launch (the first operand's alignment)."""
    m, k = math.prod(kdims), math.prod(rdims)
    # A thread per output where the kept axis is the contiguous one (coalesced loads
    # across a warp), or where rows are too short to keep a block of threads busy.
    column = (
        m >= _BLOCK
        and bool(rdims)
        and (k <= 32 or (builtins.abs(kstr[1][-1]) == 1 and builtins.abs(rstr[0][-1]) != 1))
    )
    blocks = 0
    if column:  # blocks of _COLUMNS rows, each split in _BLOCK // _COLUMNS parts
        blocks = builtins.min(-(-m // _COLUMNS), 1 << 16)
        splits = _splits(m, k, 32 * (_BLOCK // _COLUMNS), blocks)
    else:
        splits = _splits(m, k, 8 * _BLOCK, m)
    chunk = builtins.max(1, -(-k // splits))
    flat = tuple(x for ks, rs in zip(kstr[1:], rstr, strict=True) for x in (*ks, *rs))

    def geometry(mode: int, chunk: int) -> _Geometry:
        splits = builtins.max(1, -(-k // chunk)) if k else 1
        first = (blocks, splits, 1) if column else (builtins.min(m * splits, 1 << 20), 1, 1)
        grids = [first]
        if splits > 1:
            grids.append((blocks if column else builtins.min(m, 1 << 20), 1, 1))
        return _Geometry(
            grids=tuple(grids),
            sizes=(m, k, splits, chunk),
            dims=(mode, *kdims, *rdims, *kstr[0], *flat),
            partials=m * splits if splits > 1 else 0,
        )

    width = 0 if column else row_vector_width(plan, len(kdims), len(rdims))
    # rows read in 16-byte vectors: each split a whole number of them
    by_vector = geometry(2, -(-chunk // width) * width) if width else None
    return geometry(1 if column else 0, chunk), by_vector, width


def _arguments(g: _Launches, spec: ReduceSpec, phase: int, wsv: Any, wsi: Any) -> list[Any]:
    """The arguments of launch ``phase`` of ``g`` (its workspaces ``wsv``, ``wsi``)."""
    head = [g.out_view, wsv, *([wsi] if spec.op in ARG_OPS else []), *g.rest]
    return [*head, *g.sizes, phase, *g.dims]


def _launch(
    ctx: ExecutionContext,
    node: Node,
    spec: ReduceSpec,
    axes: tuple[int, ...],
    result: Tensor,
    keepdims: bool,
) -> None:
    layout, tensors, scalars = _generic_layout(node, spec, axes, result.strides, keepdims)
    if _float4_launch(ctx, layout.plan, spec, tensors[0], result, *layout.merged):
        return
    g = _generic(layout, tensors, scalars, result)
    if g.partials:
        wsv: Any = new_tensor(ctx, (g.partials,), np.dtype(spec.acc), "reduction partials")
        wsi: Any = new_tensor(ctx, (g.partials,), np.dtype(np.int64), "reduction partials")
    else:
        wsv = wsi = NULL_POINTER
    for phase, grid in enumerate(g.grids):
        args = _arguments(g, spec, phase, wsv, wsi)
        layout.kernel._enqueue_trusted(ctx, grid, _BLOCK3, args)


#: Blocks ``ca_cols4`` aims at (16 splits of the 64 column strips of (8192, 8192)), and
#: rows a split holds at least (8 warps, 8 rows in flight each).
_COLS4_BLOCKS = 1024
_COLS4_ROWS = 64
#: Blocks of ``ca_whole4`` an SM (256 threads of at most 32 registers each).
_WHOLE4_PER_SM = 8


def _float4_launch(
    ctx: ExecutionContext,
    plan: Any,
    spec: ReduceSpec,
    x: Tensor,
    result: Tensor,
    kdims: Shape,
    kstr: tuple[Shape, ...],
    rdims: Shape,
    rstr: tuple[Shape, ...],
) -> bool:
    """Launch the float4 kernel of a float32 sum/mean/prod/max/min of one tensor where
    its layout allows, and say whether it did: ``ca_cols4`` for the first axis (one kept
    dimension, contiguous in ``x`` and the result, a multiple of 4 long, at least 128;
    rows 16-byte aligned), ``ca_whole4`` for max/min of a whole contiguous, 16-byte
    aligned array. One launch each; its workspace (partials, and the counters of the
    last block, zeroed on the stream) is the launch's own, so launches on other streams
    never share it."""
    kind = _float4_kind(plan, spec, x.ptr, result.ptr, kdims, kstr, rdims, rstr)
    if kind is None:
        return False
    m, k = math.prod(kdims), rdims[0]
    if kind == "whole":
        return _whole4(ctx, spec, x, result, k)
    ld = rstr[0][0]
    strips = -(-m // 128)
    splits = builtins.max(1, builtins.min(-(-_COLS4_BLOCKS // strips), k // _COLS4_ROWS, 1024))
    rows = builtins.max(1, -(-k // splits))
    splits = builtins.max(1, -(-k // rows)) if k else 1
    view = builtin.storage_view(Tensor(x.allocation, (k, m), x.dtype, (ld, 1), x.offset))
    out = builtin.storage_view(Tensor(result.allocation, (m,), result.dtype, (1,), result.offset))
    part, count = _workspace(ctx, splits * m if splits > 1 else 0, strips)
    kernel = float4_kernel(spec.op, whole=False)
    args = (out, part, count, view, k, m, ld, rows, splits)
    kernel._enqueue_trusted(ctx, (strips, splits, 1), (256, 1, 1), args)
    return True


def _float4_kind(
    plan: Any,
    spec: ReduceSpec,
    x_ptr: int,
    result_ptr: int,
    kdims: Shape,
    kstr: tuple[Shape, ...],
    rdims: Shape,
    rstr: tuple[Shape, ...],
) -> str | None:
    """Which float4 kernel takes the reduction (``"whole"``: ``ca_whole4``, ``"cols"``:
    ``ca_cols4``; see :func:`_float4_launch`), or None: the generic kernel."""
    if (
        spec.op not in FLOAT4_OPS
        or spec.acc != "float32"
        or spec.out != "float32"
        or plan != ("x", 0, "float32")
        or len(rdims) != 1
        or x_ptr % 16
    ):
        return None
    if len(kdims) == 0 and spec.op in ("max", "min") and tuple(rstr[0]) == (1,):
        return "whole"
    m = math.prod(kdims)
    if (
        len(kdims) != 1
        or tuple(kstr[0]) != (1,)
        or tuple(kstr[1]) != (1,)
        or m % 4
        or m < 128
        or rstr[0][0] % 4
        or result_ptr % 16
    ):
        return None
    return "cols"


def _whole4(ctx: ExecutionContext, spec: ReduceSpec, x: Tensor, result: Tensor, n: int) -> bool:
    """``ca_whole4``: ``n`` float32 of ``x`` (contiguous, 16-byte aligned) into ``result``."""
    sms = ctx.device.properties.multiprocessor_count
    blocks = builtins.max(1, builtins.min(_WHOLE4_PER_SM * sms, -(-n // (4 * 256 * 8))))
    view = builtin.storage_view(Tensor(x.allocation, (n,), x.dtype, (1,), x.offset))
    out = builtin.storage_view(Tensor(result.allocation, (), result.dtype, (), result.offset))
    part, count = _workspace(ctx, blocks if blocks > 1 else 0, 1)
    kernel = float4_kernel(spec.op, whole=True)
    kernel._enqueue_trusted(ctx, (blocks, 1, 1), (256, 1, 1), (out, part, count, view, n))
    return True


def _workspace(ctx: ExecutionContext, floats: int, counters: int) -> tuple[Any, Any]:
    """``floats`` float32 partials and ``counters`` uint32 counters, zeroed on ``ctx``'s
    stream before the launch; none (null pointers) where there are no partials. A
    workspace of each launch's own: launches on other streams, and later launches
    reusing its memory, never see another's counts."""
    if not floats:
        return NULL_POINTER, NULL_POINTER
    ws = new_tensor(ctx, (floats + counters,), np.dtype(np.float32), "reduction partials")
    part = Tensor(ws.allocation, (floats,), ws.dtype, (1,), ws.offset)
    count = Tensor(ws.allocation, (counters,), np.dtype(np.uint32), (1,), ws.offset + floats)
    get_backend().memset_d8_async(count.ptr, 0, counters * 4, ctx.handle)
    return part, count


def vector_rows(x: Tensor, kept: Shape, reduced: Shape, width: int) -> bool:
    """Whether the rows of ``x`` (one operand, its storage view, with ``kept`` and
    ``reduced`` strides in elements) can be read ``width`` elements a load: the reduced
    axis contiguous, each row starting on a 16-byte boundary.

    >>> vector_rows(flat_view, (), (1,), 4)      # a whole float32 array, 256-byte aligned
    True
    """
    return vector_strides(kept, reduced, width) and x.ptr % (width * x.itemsize) == 0


def vector_strides(kept: Shape, reduced: Shape, width: int) -> bool:
    """The strides' part of :func:`vector_rows` (what a layout decides): the reduced axis
    contiguous, each row a whole number of ``width``-element vectors from the first."""
    return tuple(reduced) == (1,) and all(s % width == 0 for s in kept)


def sum(
    x: Tensor | TensorOp,
    axis: Axes = None,
    dtype: DTypeLike = None,
    out: Tensor | None = None,
    keepdims: bool = False,
) -> TensorOp:
    """The sum over ``axis`` (None: all); small integers sum as int64 (uint64), as numpy.

    >>> s = await cuasync.sum(x, axis=-1, keepdims=True)
    """
    return reduce_op("sum", "sum", x, axis, dtype=dtype, out=out, keepdims=keepdims)


def prod(
    x: Tensor | TensorOp,
    axis: Axes = None,
    dtype: DTypeLike = None,
    out: Tensor | None = None,
    keepdims: bool = False,
) -> TensorOp:
    """The product over ``axis`` (None: all); integers wrap around as numpy's.

    >>> p = await cuasync.prod(x, axis=0, dtype="float64")
    """
    return reduce_op("prod", "prod", x, axis, dtype=dtype, out=out, keepdims=keepdims)


def mean(
    x: Tensor | TensorOp,
    axis: Axes = None,
    dtype: DTypeLike = None,
    out: Tensor | None = None,
    keepdims: bool = False,
) -> TensorOp:
    """The arithmetic mean over ``axis``: float32 (the default float dtype, accumulated
    in float64) for integers and bools, float16 computed in float32.

    >>> m = await cuasync.mean(x, axis=(0, 1))
    """
    return reduce_op("mean", "mean", x, axis, dtype=dtype, out=out, keepdims=keepdims)


def max(
    x: Tensor | TensorOp, axis: Axes = None, out: Tensor | None = None, keepdims: bool = False
) -> TensorOp:
    """The largest element over ``axis``; NaN propagates; empty axes raise ArgumentError.
    Complex numbers compare as in numpy: by real part, then by imaginary part.

    >>> hi = await cuasync.max(x, axis=1)
    """
    return reduce_op("max", "max", x, axis, out=out, keepdims=keepdims)


def min(
    x: Tensor | TensorOp, axis: Axes = None, out: Tensor | None = None, keepdims: bool = False
) -> TensorOp:
    """The smallest element over ``axis``; NaN propagates; empty axes raise ArgumentError.

    >>> lo = await cuasync.min(x)
    """
    return reduce_op("min", "min", x, axis, out=out, keepdims=keepdims)


def argmax(
    x: Tensor | TensorOp,
    axis: int | None = None,
    out: Tensor | None = None,
    *,
    keepdims: bool = False,
) -> TensorOp:
    """int64 index of the first largest element along ``axis`` (None: of the flattened
    tensor, in C order); a NaN counts as the largest, as in numpy.

    >>> i = await cuasync.argmax(x, axis=-1)
    """
    return reduce_op("argmax", "argmax", x, axis, out=out, keepdims=keepdims)


def argmin(
    x: Tensor | TensorOp,
    axis: int | None = None,
    out: Tensor | None = None,
    *,
    keepdims: bool = False,
) -> TensorOp:
    """int64 index of the first smallest element along ``axis`` (None: flattened, C order).

    >>> i = await cuasync.argmin(x, axis=0)
    """
    return reduce_op("argmin", "argmin", x, axis, out=out, keepdims=keepdims)


def vdot(a: Tensor | TensorOp, b: Tensor | TensorOp) -> TensorOp:
    """The dot product of ``a`` and ``b`` flattened (same size): a 0-d tensor of their
    product's dtype, ``sum(conj(a) * b)`` in one kernel, as ``numpy.vdot``.

    Complex ``a`` is conjugated; bfloat16 products accumulate in float32 and round once
    (as ml_dtypes' dot does). Tensors of different shapes (same size) must be contiguous
    to be flattened.

    >>> d = await cuasync.vdot(x, y)
    >>> c = await cuasync.vdot(z, z)          # complex: sum(|z|^2), imaginary part 0
    """
    sizes = [getattr(v, "size", None) for v in (a, b)]
    if None not in sizes and sizes[0] != sizes[1]:
        raise ShapeError(
            f"vdot: a has {sizes[0]} elements (shape {a.shape}) and b has {sizes[1]} "
            f"(shape {b.shape}); they must have the same number"
        )
    if None not in sizes and a.shape != b.shape:
        for v, arg in ((a, "a"), (b, "b")):  # checked before either is consumed
            if not isinstance(v, (Tensor, TensorOp)):
                leaf(v, arg)
        a, b = (flattened(v) for v in (a, b))
    for v, arg in ((a, "a"), (b, "b")):
        if not isinstance(v, (Tensor, TensorOp)):
            leaf(v, arg)  # the operand error elementwise ops give
            raise ArgumentError(f"vdot: {arg} must be a cuasync.Tensor or TensorOp")
    names = [dtype_name(v.dtype) for v in (a, b)]
    if all(n in ELEMENTWISE_DTYPES and n not in _WIDE_VDOT for n in names):
        product = elementwise.multiply(a, b)
        return reduce_op("vdot", "sum", product, None, dtype=product.dtype)
    return _vdot_wide(a, b)


#: The dtypes whose vdot is not an elementwise product: complex (``a`` is conjugated)
#: and bfloat16 (products accumulate in float32, not rounded to bfloat16 first).
_WIDE_VDOT = frozenset(("bfloat16", "complex64", "complex128"))


def _vdot_wide(a: Tensor | TensorOp, b: Tensor | TensorOp) -> TensorOp:
    """vdot where an operand is bfloat16 or complex, which elementwise ops do not take:
    a ``conj(a) * b`` node in the accumulator's dtype, summed by the reduction kernel."""
    for v, arg in ((a, "a"), (b, "b")):
        if isinstance(v, TensorOp) and v._consumed:
            v._take()  # raises OpConsumedError
        check_dtype(v.dtype, arg, "vdot")
    try:
        res = np.result_type(a.dtype, b.dtype)
    except TypeError:  # no common dtype (bfloat16 and float16, ...)
        raise DTypeError(
            f"vdot: a is {dtype_name(a.dtype)} and b is {dtype_name(b.dtype)}, which have no "
            "common dtype; convert one with .astype()"
        ) from None
    check_dtype(res, "the product of a and b", "vdot")
    if a.device is not b.device:
        raise InvalidDeviceError(
            f"vdot: a is on device {a.device.ordinal}, b on device {b.device.ordinal}"
            if a.device is not None and b.device is not None
            else "vdot: a and b live on different devices"
        )
    if a.shape != b.shape:
        raise ShapeError(f"vdot: a has shape {a.shape} and b {b.shape}")  # (flattened above)
    acc = np.dtype(_accumulator(res))
    nodes = (_leaf(a, "a"), _leaf(b, "b"))
    product = Node("op", "vdot", a.shape, acc, None, nodes, (acc, acc), a.device)
    return reduce_op("vdot", "sum", TensorOp(product), None, dtype=res)


def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> TensorOp:
    """The 2-norm (``sqrt(sum(|x|**2))``) over ``axis``: vectors (``ord`` None or 2) and
    the Frobenius norm of matrices (``ord`` None or ``"fro"``); float32 for integers
    (the default float dtype; float64 inside),
    real for complex (float32 for complex64), bfloat16 for bfloat16 (float32 inside).

    >>> n = await cuasync.linalg.norm(x, axis=-1)
    """
    if isinstance(x, (Tensor, TensorOp)) and ord is not None:
        count = len(normalize_axes(axis, x.ndim, "norm"))
        if not ((ord == 2 and count == 1) or (ord == "fro" and count == 2)):
            raise ArgumentError(
                f"norm: ord={ord!r} over {count} axes is not supported; cuasync computes the "
                "2-norm of vectors (ord=None or 2) and the Frobenius norm (ord=None or 'fro')"
            )
    return reduce_op("norm", "norm", x, axis, keepdims=keepdims)
