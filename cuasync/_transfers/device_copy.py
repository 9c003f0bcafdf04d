"""Copies within device memory, the pieces every op that makes a tensor builds on.

``new_tensor`` allocates an op's output on its stream, ``copy_strided`` copies a strided
block with as few driver calls as possible, and ``kernel_copy`` gathers any view (or
converts its dtype) with a built-in kernel where the copy engines cannot read it
(``memcpy_able``), or would take many calls or narrow rows for it (``engine_copies``).
The copy ops users call are in :mod:`.copies`, above the tensor ops.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from .._backends import get_backend
from .._core.context import ExecutionContext
from .._core.memory import Allocation
from .._dtypes import dtype_info, dtype_name
from .._launch import builtin
from .._launch.kernel import Kernel
from .._tensor import Shape, Tensor, contiguous_strides
from ..errors import OutOfMemoryError

__all__ = [
    "ADDRESSABLE",
    "byte_strides",
    "contiguous_byte_strides",
    "copy_kernel",
    "copy_strided",
    "engine_copies",
    "kernel_copy",
    "memcpy_able",
    "new_tensor",
]

#: More bytes than any device can address.
ADDRESSABLE = 2**64


def copy_strided(
    ctx: ExecutionContext,
    kind: str,
    dst: int,
    dst_strides: Shape,
    src: int,
    src_strides: Shape,
    shape: Shape,
    itemsize: int,
) -> None:
    """Enqueue a copy of a strided block (strides in bytes) with as few driver calls as possible."""
    if any(d == 0 for d in shape):
        return
    backend = get_backend()
    plan = _copy_plan(shape, src_strides, dst_strides, itemsize)
    if isinstance(plan, int):  # one contiguous block
        getattr(backend, f"memcpy_{kind}_async")(dst, src, plan, ctx.handle)
        return
    width, height, src_pitch, dst_pitch, outer = plan
    for index in itertools.product(*(range(d) for d, _, _ in outer)):
        s_off = sum(i * s for i, (_, s, _) in zip(index, outer, strict=True))
        d_off = sum(i * t for i, (_, _, t) in zip(index, outer, strict=True))
        backend.memcpy_2d_async(
            dst + d_off, dst_pitch, src + s_off, src_pitch, width, height, ctx.handle, kind
        )


#: The narrowest rows (bytes) a copy of a view into a contiguous tensor leaves to the copy
#: engines (:func:`engine_copies`); narrower ones move a few bytes a transfer, where a
#: kernel reads them coalesced. A choice, not yet measured on a GPU (bench transfers).
ENGINE_ROW_BYTES = 128


def engine_copies(t: Tensor) -> bool:
    """Whether a contiguous copy of ``t`` is left to the copy engines: one driver call
    (:func:`copy_strided`) of one block or of rows at least :data:`ENGINE_ROW_BYTES`
    wide. Else (a transposed view: a call per column, rows of one element) one kernel
    launch gathers it (:func:`kernel_copy`), as it does a view they cannot read.

    >>> engine_copies(x[:, :256]), engine_copies(x.T)    # x (512, 512) float32
    (True, False)
    """
    if not memcpy_able(t):
        return False
    if t.size == 0:
        return True
    size = t.itemsize
    plan = _copy_plan(t.shape, byte_strides(t), contiguous_byte_strides(t.shape, size), size)
    if isinstance(plan, int):
        return True
    width, height, _, _, outer = plan
    return math.prod(d for d, _, _ in outer) == 1 and (height == 1 or width >= ENGINE_ROW_BYTES)


def _copy_plan(
    shape: Shape, src_strides: Shape, dst_strides: Shape, itemsize: int
) -> int | tuple[int, int, int, int, list[tuple[int, int, int]]]:
    """How :func:`copy_strided` copies a block of ``shape`` (no zero extent; strides in
    bytes): the bytes of one contiguous block, or the rows of its 2D copies (width,
    height, source and destination pitch) and the outer dimensions it loops over
    (extent, source and destination stride), one call per index."""
    # Drop unit dimensions, then merge dimensions that are contiguous in both layouts.
    dims = [(d, s, t) for d, s, t in zip(shape, src_strides, dst_strides, strict=True) if d != 1]
    merged: list[tuple[int, int, int]] = []
    for d, s, t in reversed(dims):
        if merged and s == merged[-1][0] * merged[-1][1] and t == merged[-1][0] * merged[-1][2]:
            n, s0, t0 = merged[-1]
            merged[-1] = (n * d, s0, t0)
        else:
            merged.append((d, s, t))
    merged.reverse()  # outermost first
    if not merged or (len(merged) == 1 and merged[0][1] == merged[0][2] == itemsize):
        return (merged[0][0] if merged else 1) * itemsize
    n0, s0, t0 = merged[-1]
    if s0 == t0 == itemsize:  # rows of contiguous bytes
        width = n0 * itemsize
        if len(merged) >= 2:
            height, src_pitch, dst_pitch = merged[-2]
            outer = merged[:-2]
        else:
            height, src_pitch, dst_pitch, outer = 1, width, width, []
    else:  # one element per row
        width, height, src_pitch, dst_pitch = itemsize, n0, s0, t0
        outer = merged[:-1]
    if height > 1 and min(src_pitch, dst_pitch) < width:
        # cuMemcpy2D needs both pitches >= the row width: a broadcast (pitch 0) or
        # overlapping rows are copied one row per call (the driver reads a pitch-0
        # source as if it were dense).
        outer = [*outer, (height, src_pitch, dst_pitch)]
        height, src_pitch, dst_pitch = 1, width, width
    return width, height, src_pitch, dst_pitch, outer


def memcpy_able(t: Tensor) -> bool:
    """Whether the copy engines can read (or write) ``t``: no reversed or broadcast
    (stride <= 0) axis, or no element at all (an empty copy is no driver call)."""
    return t.size == 0 or all(s > 0 for s, d in zip(t.strides, t.shape, strict=True) if d > 1)


def copy_kernel(dtype: np.dtype[Any]) -> Kernel:
    """The kernel :func:`kernel_copy` launches to write elements of ``dtype`` (an op
    that may copy with it declares it as its first use)."""
    return builtin.kernel("convert", dtype_name(dtype))


def kernel_copy(ctx: ExecutionContext, dst: Tensor, src: Tensor) -> None:
    """Enqueue a kernel copying any view ``src`` into the contiguous ``dst``, converting
    it to ``dst``'s dtype (``ndarray.astype``'s rules) where that differs."""
    kernel = copy_kernel(dst.dtype)
    code = dtype_info(src.dtype).code
    flat = builtin.flat(dst)
    for sub, dims, strides, first in builtin.chunks(src):
        out = Tensor(flat.allocation, sub.shape, flat.dtype, None, flat.offset + first)
        builtin.launch(ctx, kernel, sub.size, out, sub, code, sub.size, *dims, *strides)


def new_tensor(ctx: ExecutionContext, shape: Shape, dtype: np.dtype[Any], what: str) -> Tensor:
    """Allocate a contiguous tensor on ``ctx``'s stream, declared as written by ``what``.

    Refused while capturing a graph (the allocation would be baked into every replay).
    """
    ctx.reject_in_capture(what)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes >= ADDRESSABLE:  # the driver's size_t could not even express it
        raise OutOfMemoryError(nbytes, f"device memory for a tensor of shape {shape}")
    alloc = Allocation(ctx.device, nbytes, ctx.stream)
    ctx.write(alloc)
    return Tensor(alloc, shape, dtype)


def byte_strides(t: Tensor) -> Shape:
    return tuple(s * t.itemsize for s in t.strides)


def contiguous_byte_strides(shape: Shape, itemsize: int) -> Shape:
    return tuple(s * itemsize for s in contiguous_strides(shape))
