"""How an elementwise kernel covers its output (:func:`layout`), and the launch plan
cached per seen layout (:func:`express_launch`).

Executing an expression the long way walks its tree into a :func:`~.codegen.make_plan`,
resolves broadcasting and strides into merged dimensions, picks the kernel, builds
storage views and converts scalars, inside an :class:`~cuasync._core.context.ExecutionContext`.
A :class:`LaunchPlan` keeps all of that but the arguments, keyed by what decides it: the
tree's structure and dtypes, which leaves are scalars of which kind, the output's shape
and strides (None: a new contiguous tensor), and each tensor operand's shape and strides
(its broadcast layout and contiguity), walked in C (``plan_key``, ``reactor/python/plan.c``;
the plan itself is made here, on a miss). A seen expression is then a lookup, the
output's allocation and a launch op from the kernel's own launcher (``kernel[grid,
block]``, the native ``Launcher``), all in C (:func:`express_launch`,
``reactor/python/launches.c``): the same launch op (:class:`~cuasync._launch.kernel._Launch`)
a raw kernel launch makes, submitted by the same native core. Scalars are kernel
parameters, so a new scalar value reuses the plan; pointers are checked for vector
alignment on every launch.

>>> launch = express_launch(op, stream)   # a _Launch, or None: the long way
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .._core import block_cache
from .._core.device import Stream
from .._core.memory import Allocation
from .._dtypes import dtype_name
from .._launch import builtin
from .._launch.kernel import Kernel
from .._native import NATIVE
from .._tensor import Shape, Tensor, contiguous_strides
from .codegen import (
    _WEAK_C,
    UNROLL,
    VECTOR_BLOCK,
    VECTOR_GRID,
    VECTORS,
    kernel_for,
    make_plan,
    scalar_arg,
    scalar_specs,
    vector_width,
)
from .expr import Node
from .seen import remember

plan_key = NATIVE.plan_key

__all__ = [
    "LAUNCHES",
    "LaunchPlan",
    "Layout",
    "broadcast_strides",
    "express_launch",
    "layout",
    "merge_axes",
    "new_tensor_on",
    "record_plan",
    "vector_access",
]


def merge_axes(shape: Shape, strides: list[Shape]) -> tuple[Shape, list[Shape]]:
    """Drop length-1 axes and merge axes that are contiguous in every operand."""
    dims: list[int] = []
    merged: list[list[int]] = [[] for _ in strides]
    for j, d in enumerate(shape):
        if d == 1:
            continue
        if dims and all(m[-1] == s[j] * d for m, s in zip(merged, strides, strict=True)):
            dims[-1] *= d
            for m, s in zip(merged, strides, strict=True):
                m[-1] = s[j]
            continue
        dims.append(d)
        for m, s in zip(merged, strides, strict=True):
            m.append(s[j])
    return tuple(dims), [tuple(m) for m in merged]


def broadcast_strides(t: Tensor, shape: Shape) -> Shape:
    """``t``'s strides over ``shape`` (it broadcasts to): 0 along its broadcast axes."""
    lead = len(shape) - t.ndim
    return (0,) * lead + tuple(
        0 if d == 1 and n != 1 else s
        for d, s, n in zip(t.shape, t.strides, shape[lead:], strict=True)
    )


class Layout(NamedTuple):
    """How one elementwise kernel covers its output: ``plan`` and its ``tensors`` and
    ``scalars`` (:func:`~.codegen.make_plan`), the merged ``dims``, each operand's
    ``strides`` over them (the output's first), whether they are all ``contiguous``, the
    ``kernel``, and the elements of its vector accesses (``width``, contiguous only)."""

    plan: Any
    tensors: list[Tensor]
    scalars: list[Any]
    dims: Shape
    strides: list[Shape]
    contiguous: bool
    kernel: Kernel
    width: int


def layout(node: Node, shape: Shape, strides: Shape) -> Layout:
    """The :class:`Layout` of ``node`` (an op whose leaves are tensors and scalars)
    writing an output of ``shape`` and ``strides``; nothing is enqueued. A pending leaf
    raises ``ValueError`` (:func:`run` executes those first)."""
    plan, tensors, scalars = make_plan(node)
    dense = contiguous_strides(node.shape)
    dims: Shape
    if (
        shape == node.shape
        and strides == dense
        and all(t.shape == shape and t.strides == dense for t in tensors)
    ):  # the common case
        dims = (math.prod(shape),)
        merged: list[Shape] = [(1,)] * (len(tensors) + 1)
    else:
        dims, merged = merge_axes(
            node.shape, [strides, *(broadcast_strides(t, node.shape) for t in tensors)]
        )
    contiguous = not dims or (len(dims) == 1 and all(s == (1,) for s in merged))
    assert node.dtype is not None  # (an op node's)
    out = dtype_name(node.dtype)
    kernel = kernel_for(plan, out, 0 if contiguous else len(dims))
    width = vector_width(plan, out) if contiguous else 1
    return Layout(plan, tensors, scalars, dims, merged, contiguous, kernel, width)


def vector_access(views: Sequence[Tensor], width: int) -> bool:
    """Whether a contiguous kernel may move every operand of ``views`` (the output's
    first) ``width`` elements an access: each pointer aligned to that many of its
    elements (``x[1:]`` of a float32 ``x`` is not, for 4 of them: one element an access).

    >>> vector_access([out, x], 4)       # both at the start of an allocation
    True
    """
    return all(v.ptr % (width * v.itemsize) == 0 for v in views)


class LaunchPlan(NamedTuple):
    """What launching one seen layout needs besides its arguments: the ``kernel``, its
    launchers for vector and element accesses (``vec_launch`` is None where it has no
    vector accesses), the output's ``dtype`` and bytes, the scalars' ``specs`` (None: all
    weak, passed as they are), whether an operand needs its storage view (``bits``:
    float16, bfloat16), the bytes each operand's pointer must be a multiple of for vector
    accesses (``aligns``, the output's first), the null pointers passed after the output
    (``nulls``: a reduction's unused workspace), the arguments after the scalars of the
    element and the vector launch (``tail``, ``vec_tail``: an elementwise kernel's element
    count, its strided kernel's dims and strides, its contiguous kernel's vec flag),
    each operand's element size (``itemsizes``, the output's first) and the output's
    ``strides`` (a new output's: contiguous). Its arguments: the output, the nulls, the
    operands, the scalars, the tail. Read natively (``reactor/python/launches.c``), by
    these names; a reduction's is made by ``reductions._reduce_plan_for``."""

    kernel: Kernel
    vec_launch: Callable[..., Any] | None
    launch: Callable[..., Any]
    dtype: Any
    nbytes: int
    specs: tuple[str, ...] | None
    bits: bool
    aligns: tuple[int, ...]
    nulls: int
    tail: tuple[int, ...]
    vec_tail: tuple[int, ...] | None
    itemsizes: tuple[int, ...]
    strides: Shape


#: Plans by the native ``plan_key`` of the expression: what decides them (each op's name,
#: loop dtypes, dtype and arity; each tensor operand's dtype, shape and strides, its
#: broadcast layout and contiguity; each scalar's dtype or weak type; the output's shape
#: and strides, None for a new tensor), in ``make_plan``'s order; a reduction's by
#: (its tree's key, its own key), None where the long way runs it.
_plans: dict[tuple[Any, ...], LaunchPlan | None] = {}


def _make_plan(node: Node, shape: Shape, strides: Shape, tensors: list[Tensor]) -> LaunchPlan:
    lay = layout(node, shape, strides)
    n = math.prod(lay.dims)
    specs = scalar_specs(lay.plan)
    bits = any(builtin.BIT_DTYPES.get(dtype_name(t.dtype)) for t in tensors) or bool(
        builtin.BIT_DTYPES.get(dtype_name(node.dtype))
    )
    kernel, block = lay.kernel, builtin.BLOCK
    vec_tail: tuple[int, ...] | None = None
    if lay.contiguous:  # (vectors: one a thread, one pass of the grid, as tensorop.run)
        vec_work = -(-n // (lay.width * VECTORS))
        vec_launch = kernel[builtin.blocks(vec_work, VECTOR_BLOCK, VECTOR_GRID), VECTOR_BLOCK]
        launch = kernel[builtin.blocks(-(-n // UNROLL)), block]
        tail: tuple[int, ...] = (n, 0)  # (the kernel's int vec: 1 for its vector accesses)
        vec_tail = (n, 1)
    else:
        vec_launch = None
        launch = kernel[builtin.blocks(n), block]
        tail = (n, *lay.dims, *(x for s in lay.strides for x in s))
    return LaunchPlan(
        kernel=lay.kernel,
        vec_launch=vec_launch,
        launch=launch,
        dtype=node.dtype,
        nbytes=math.prod(shape) * node.dtype.itemsize,
        specs=None if all(s in _WEAK_C for s in specs) else specs,
        bits=bits,
        aligns=tuple(lay.width * dt.itemsize for dt in [node.dtype, *(t.dtype for t in tensors)]),
        nulls=0,
        tail=tail,
        vec_tail=vec_tail,
        itemsizes=tuple(dt.itemsize for dt in [node.dtype, *(t.dtype for t in tensors)]),
        strides=strides,
    )


def _plan_for(
    node: Node, out: Tensor | None, key: tuple[Any, ...], tensors: list[Tensor]
) -> LaunchPlan | None:
    """The plan of a layout not seen before (``key``: ``plan_key``'s), made and recorded;
    None where the output has no elements (the long way runs nothing)."""
    shape = node.shape
    if math.prod(shape) == 0:
        return None
    strides = contiguous_strides(shape) if out is None else out.strides
    return record_plan(key, _make_plan(node, shape, strides, tensors))


def record_plan(key: tuple[Any, ...], plan: LaunchPlan | None) -> LaunchPlan | None:
    """``plan`` recorded as ``key``'s (None: the long way runs that layout)."""
    return remember(_plans, key, plan, LAUNCHES.memo)


def _new_output(plan: LaunchPlan, shape: Shape, stream: Stream) -> Tensor:
    """A new contiguous tensor of ``plan``'s dtype, allocated on ``stream`` (where the
    native launch takes no block from the block cache)."""
    return Tensor(Allocation(stream.device, plan.nbytes, stream), shape, plan.dtype)


def new_tensor_on(
    stream: Stream, nbytes: int, shape: Shape, dtype: Any, strides: Shape | None = None
) -> Tensor:
    """A new contiguous tensor of ``nbytes`` on ``stream``, for the makers of
    ``LAUNCHES.pending_launches``: a block of the block cache taken natively where it
    gives one (``ExpressLaunches.new_tensor``), else ``Tensor(Allocation(...))``.
    ``strides``: the shape's contiguous strides, where the caller has them.

    >>> t = new_tensor_on(stream, 4096, (1024,), SUPPORTED["float32"])
    """
    if strides is None:
        strides = contiguous_strides(shape)
    found: Tensor | None = LAUNCHES.new_tensor(nbytes, shape, dtype, strides, stream)
    if found is None:
        found = Tensor(Allocation(stream.device, nbytes, stream), shape, dtype, strides)
    return found


#: TensorOps as raw launches (``reactor/python/launches.c``): :func:`express_launch`.
LAUNCHES = NATIVE.ExpressLaunches(
    LaunchPlan,
    _plans,
    _plan_for,
    _new_output,
    builtin.storage_view,
    scalar_arg,
    block_cache.SMALL_MAX,
)

#: ``express_launch(op, stream)``: the launch op (not yet taken) computing the TensorOp
#: ``op`` on ``stream`` into its ``out=`` or a new tensor allocated there, or None where
#: the long way must run it (a capturing stream, another device's stream, tracing, a
#: device fault seen, a pending leaf, no elements, a kernel not yet prepared for the
#: device: its first use prepares it off the loop). A reduction is its generic kernel's
#: one launch (``reduce_plan_for``, set by ``reductions``), or None where it needs more.
#:
#: >>> launch = express_launch(op, stream)
#: >>> future = launch.submit_on(stream)       # a raw launch's submission
express_launch = LAUNCHES.launch
