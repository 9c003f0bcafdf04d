"""Running a contraction: operands as batches of BLAS-readable matrices, then GEMMs.

A matrix BLAS can read in place is row- or column-major with any leading dimension
(:func:`~cuasync._backends.base.matrix_layout`); other views are copied contiguous in
the op's submission. Batch axes that merge into one stride (0 for a broadcast operand)
become one strided-batched call of the backend's ``gemm``; the rest loop. Integer
products (numpy's wrapping ``matmul``) go to cuBLAS's int8 GEMM (int32 accumulation,
then cast) where it applies, else to a tiled kernel (:mod:`cuasync._ops.tiled_gemm`);
so do small float32 and float64 products (:func:`~cuasync._ops.tiled_gemm.takes`),
whose cuBLAS call would cost more host time than the product.

>>> gemm(ctx, a3, b3, c3, 1.0, 0.0, "highest")   # (*batch, m, k) @ (*batch, k, n)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

from .._backends import get_backend
from .._backends.base import matrix_layout
from .._core.context import ExecutionContext
from .._dtypes import SUPPORTED, dtype_name
from .._first_use import CUBLAS
from .._launch.guard import guarded
from .._launch.library_call import Calls, PreparedCall
from .._tensor import Shape, Tensor
from .._transfers.device_copy import copy_strided, kernel_copy, new_tensor
from ..errors import LibraryError
from . import tiled_gemm
from .tensorop import merge_axes

__all__ = [
    "broadcast_to",
    "calls",
    "copy_into",
    "fix",
    "gemm",
    "gemm_call",
    "group",
    "one_call",
    "regroup",
    "view",
]


def view(t: Tensor, shape: Shape, strides: Shape) -> Tensor:
    """Another view of ``t``'s memory, from its first element (strides in elements)."""
    return Tensor(t.allocation, shape, t.dtype, strides, t.offset)


def _dense(ctx: ExecutionContext, t: Tensor, what: str) -> Tensor:
    """A contiguous copy of the view ``t`` (read now, in this submission)."""
    copy = new_tensor(ctx, t.shape, t.dtype, what)
    src = ctx.read(t.allocation, what) + t.offset * t.itemsize
    size = t.itemsize
    copy_strided(
        ctx,
        "dtod",
        copy.ptr,
        tuple(s * size for s in copy.strides),
        src,
        tuple(s * size for s in t.strides),
        t.shape,
        size,
    )
    return copy


def _readable(t: Tensor) -> bool:
    *batch, r, c = t.shape
    return matrix_layout(r, c, t.strides[-2], t.strides[-1]) is not None and all(
        s >= 0 or d == 1 for s, d in zip(t.strides[:-2], batch, strict=True)
    )


def gemm(
    ctx: ExecutionContext,
    a: Tensor,
    b: Tensor,
    c: Tensor,
    alpha: complex,
    beta: complex,
    precision: str,
    *,
    skippable: bool = False,
) -> None:
    """Enqueue ``c = alpha * a @ b + beta * c`` for views ``(*batch, m, k)``,
    ``(*batch, k, n)``, ``(*batch, m, n)`` of one batch shape (0 strides broadcast).
    ``skippable``: ``c`` is a tensor the op made, so a cancelled scope may skip the
    cuBLAS calls (:func:`~cuasync._launch.guard.guarded`)."""
    *batch, _, k = a.shape
    n = b.shape[-1]
    if c.size == 0:
        return
    if a.dtype.kind in "iu":
        for xa, xb, xc in _batches(a, b, c):
            if not _int8_blas(ctx, xa, xb, xc, alpha, beta):
                tiled_gemm.launch(ctx, xa, xb, xc, alpha, beta)
        return
    if tiled_gemm.takes(c.dtype, c.size * k, k, precision):  # (any layout: no copies)
        for xa, xb, xc in _batches(a, b, c):
            tiled_gemm.launch(ctx, xa, xb, xc, alpha, beta, scoped=skippable)
        return
    if k == 0:  # nothing is read from a and b: give them any readable layout
        a = view(a, a.shape, (*(0 for _ in batch), 1, 1))
        b = view(b, b.shape, (*(0 for _ in batch), max(1, n), 1))
    if not _readable(a):
        a = _dense(ctx, a, "a")
    if not _readable(b):
        b = _dense(ctx, b, "b")
    target = c
    if not _readable(c):
        target = new_tensor(ctx, c.shape, c.dtype, "matmul result")
        if beta != 0:
            copy_into(ctx, target, c)
    flops = 8 * math.prod(target.shape) * k if skippable else 0  # (a complex product: 8)
    calls(ctx, _batches(a, b, target), alpha, beta, precision, flops)
    if target is not c:
        copy_into(ctx, c, target)


def one_call(a: Tensor, b: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor] | None:
    """The batched views of the one backend GEMM :func:`gemm` makes of ``a``, ``b`` and
    ``c``, where that is all it makes: a float or complex product with ``k > 0`` of views
    BLAS reads in place whose batch axes merge into one (else None)."""
    if a.dtype.kind in "iu" or a.shape[-1] == 0 or c.size == 0:
        return None
    if not (_readable(a) and _readable(b) and _readable(c)):
        return None
    strides = [a.strides[:-2], b.strides[:-2], c.strides[:-2]]
    if len(merge_axes(a.shape[:-2], strides)[0]) > 1:  # (several batch groups)
        return None
    return _batches(a, b, c)[0]


def calls(
    ctx: ExecutionContext,
    views: list[tuple[Tensor, Tensor, Tensor]],
    alpha: complex,
    beta: complex,
    precision: str,
    flops: int,
) -> None:
    """Enqueue the backend's GEMM of each ``(a, b, c)`` of ``views`` (batches of views of
    one ``a``, ``b`` and ``c``; what they read and write declared), in a region a
    cancelled scope may skip where ``flops`` says it is worth it (0: it always runs)."""
    a, b, c = views[0]
    if a.shape[-1]:
        ctx.read(a.allocation, "a")
        ctx.read(b.allocation, "b")
    ctx.write(c.allocation, "out")
    backend = get_backend()
    with guarded(ctx, "library", flops=flops):
        for xa, xb, xc in views:
            backend.gemm(ctx.handle, xa, xb, xc, alpha, beta, precision, ctx.error_box)
    CUBLAS.prepared_on(ctx.device.ordinal)  # (loaded now, if its first use did not)


def _gemm(stream: int, args: tuple[Any, ...], errors: Callable[[], list[BaseException]]) -> None:
    """The GEMM's work as a library call (:class:`~cuasync._launch.library_call.Calls`):
    the backend's GEMM of ``args`` (``(a, b, c, alpha, beta, precision)``, views
    :func:`one_call` made) on ``stream``."""
    a, b, c, alpha, beta, precision = args
    get_backend().gemm(stream, a, b, c, alpha, beta, precision, errors)


#: The GEMM as a library call, per device ordinal (:func:`gemm_call`).
_GEMM_CALLS = Calls("gemm", _gemm)


def gemm_call(ordinal: int) -> PreparedCall:
    """The backend's GEMM on device ``ordinal`` as a launch op's prepared call: the op
    :func:`~cuasync._launch.library_call.library_call` makes of a seen product's views,
    ``args`` ``(a, b, c, alpha, beta, precision)``, submitted by the native core.

    >>> library_call(gemm_call(0), device, (a, b, c, 1.0, 0.0, "highest"), ...)
    """
    return _GEMM_CALLS.on(ordinal)


def _batches(a: Tensor, b: Tensor, c: Tensor) -> list[tuple[Tensor, Tensor, Tensor]]:
    """Views ``(count, r, c)`` of ``a``, ``b`` and ``c`` (``(*batch, r, c)``), one per
    batch index outside the innermost merged batch axis."""
    batch = a.shape[:-2]
    dims, (sa, sb, sc) = merge_axes(batch, [a.strides[:-2], b.strides[:-2], c.strides[:-2]])
    count, step = (dims[-1], (sa[-1], sb[-1], sc[-1])) if dims else (1, (0, 0, 0))
    found = []
    for index in itertools.product(*(range(d) for d in dims[:-1])):
        offsets = [sum(i * s for i, s in zip(index, st, strict=False)) for st in (sa, sb, sc)]
        views = [
            Tensor(
                t.allocation,
                (count, *t.shape[-2:]),
                t.dtype,
                (s, *t.strides[-2:]),
                t.offset + o,
            )
            for t, s, o in zip((a, b, c), step, offsets, strict=True)
        ]
        found.append((views[0], views[1], views[2]))
    return found


#: cuBLAS's int8 GEMM (int32 accumulation) refuses what it does not support with this.
_CUBLAS_NOT_SUPPORTED = 15
#: int8 products summed in int32 are exact below this many terms (127 * 128 * k < 2**31).
_INT8_EXACT_K = 1 << 17


def _int8_blas(
    ctx: ExecutionContext, a: Tensor, b: Tensor, c: Tensor, alpha: complex, beta: complex
) -> bool:
    """Enqueue the int8 product ``c = a @ b`` as cuBLAS's int8 GEMM into an int32
    accumulator, then cast to int8 (wrapping, as numpy's); False, enqueuing nothing,
    where that does not apply: not int8, ``alpha != 1`` or ``beta != 0``, ``c`` not
    contiguous, ``k`` too large for exact int32 sums, or cuBLAS's constraints for int8
    (operands 4-byte aligned, leading dimensions multiples of 4) not met, or cuBLAS
    answers CUBLAS_STATUS_NOT_SUPPORTED. The emulator's twin is numpy."""
    count, m, k = a.shape
    if dtype_name(c.dtype) != "int8" or alpha != 1 or beta != 0 or not 0 < k < _INT8_EXACT_K:
        return False
    n = c.shape[2]
    dense = c.strides[1:] == (n, 1) and (count == 1 or c.strides[0] == m * n)
    if not dense or ctx.capturing:  # (the accumulator is a new tensor)
        return False
    for t in (a, b):
        layout = matrix_layout(t.shape[1], t.shape[2], t.strides[1], t.strides[2])
        if layout is None or layout[1] % 4 or t.ptr % 4 or (count > 1 and t.strides[0] % 4):
            return False
        if t.strides[0] < 0:
            return False
    acc = new_tensor(ctx, c.shape, SUPPORTED["int32"], "int8 matmul accumulator")
    ctx.read(a.allocation, "a")
    ctx.read(b.allocation, "b")
    try:
        get_backend().gemm(ctx.handle, a, b, acc, 1, 0, "highest", ctx.error_box)
    except LibraryError as exc:
        if exc.status != _CUBLAS_NOT_SUPPORTED:
            raise
        return False
    kernel_copy(ctx, c, acc)
    return True


def copy_into(ctx: ExecutionContext, dst: Tensor, src: Tensor) -> None:
    """Enqueue a copy of the view ``src`` into the view ``dst`` (same shape and dtype)."""
    size = dst.itemsize
    sp = ctx.read(src.allocation, "src") + src.offset * size
    dp = ctx.write(dst.allocation, "out") + dst.offset * size
    copy_strided(
        ctx,
        "dtod",
        dp,
        tuple(s * size for s in dst.strides),
        sp,
        tuple(s * size for s in src.strides),
        dst.shape,
        size,
    )


def group(t: Tensor, groups: list[tuple[int, ...]]) -> Tensor | None:
    """``t`` with its axes regrouped: each group of axes (in order) becomes one axis;
    None when a group's axes do not merge into one stride (an empty group, which holds
    no element, merges into any)."""
    shape, strides = [], []
    for g in groups:
        dims = [(t.shape[i], t.strides[i]) for i in g if t.shape[i] != 1]
        size = math.prod(t.shape[i] for i in g)
        if not dims or size == 0:
            stride = 1
        else:
            stride = dims[-1][1]
            for (_, s0), (d1, s1) in itertools.pairwise(dims):
                if s0 != s1 * d1:
                    return None
        shape.append(size)
        strides.append(stride)
    return Tensor(t.allocation, tuple(shape), t.dtype, tuple(strides), t.offset)


def regroup(ctx: ExecutionContext, t: Tensor, order: tuple[int, ...], groups: list[int]) -> Tensor:
    """``t`` permuted by ``order``, its axes then grouped by the sizes ``groups``
    (each group one axis); copied contiguous first where the group does not merge."""
    p = Tensor(
        t.allocation,
        tuple(t.shape[i] for i in order),
        t.dtype,
        tuple(t.strides[i] for i in order),
        t.offset,
    )
    bounds, start = [], 0
    for g in groups:
        bounds.append(tuple(range(start, start + g)))
        start += g
    found = group(p, bounds)
    if found is None:
        found = group(_dense(ctx, p, "operand"), bounds)
        assert found is not None
    return found


def fix(ctx: ExecutionContext, t: Tensor, what: str) -> Tensor:
    """``t`` if BLAS can read its matrices, else a contiguous copy."""
    return t if _readable(t) else _dense(ctx, t, what)


def broadcast_to(t: Tensor, batch: Shape) -> Tensor:
    """``t`` (``(*b, r, c)``) with its batch axes broadcast to ``batch`` (0 strides)."""
    lead = len(batch) - (t.ndim - 2)
    strides = (0,) * lead + tuple(
        0 if d == 1 and n != 1 else s
        for d, s, n in zip(t.shape[:-2], t.strides[:-2], batch[lead:], strict=True)
    )
    return Tensor(
        t.allocation, (*batch, *t.shape[-2:]), t.dtype, strides + t.strides[-2:], t.offset
    )
