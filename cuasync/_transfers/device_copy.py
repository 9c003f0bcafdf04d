"""Copies within device memory, the pieces every op that makes a tensor builds on.

``new_tensor`` allocates an op's output on its stream, ``copy_strided`` copies a strided
block with as few driver calls as possible, and ``kernel_copy`` gathers any view (or
converts its dtype) with a built-in kernel where the copy engines cannot read it
(``memcpy_able``). The copy ops users call are in :mod:`.copies`, above the tensor ops.
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
    "byte_strides",
    "contiguous_byte_strides",
    "copy_kernel",
    "copy_strided",
    "kernel_copy",
    "memcpy_able",
    "new_tensor",
]

#: More bytes than any device can address.
_ADDRESSABLE = 2**64


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
        nbytes = (merged[0][0] if merged else 1) * itemsize
        getattr(backend, f"memcpy_{kind}_async")(dst, src, nbytes, ctx.handle)
        return
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
    for index in itertools.product(*(range(d) for d, _, _ in outer)):
        s_off = sum(i * s for i, (_, s, _) in zip(index, outer, strict=True))
        d_off = sum(i * t for i, (_, _, t) in zip(index, outer, strict=True))
        backend.memcpy_2d_async(
            dst + d_off, dst_pitch, src + s_off, src_pitch, width, height, ctx.handle, kind
        )


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
    if nbytes >= _ADDRESSABLE:  # the driver's size_t could not even express it
        raise OutOfMemoryError(nbytes, f"device memory for a tensor of shape {shape}")
    alloc = Allocation(ctx.device, nbytes, ctx.stream)
    ctx.write(alloc)
    return Tensor(alloc, shape, dtype)


def byte_strides(t: Tensor) -> Shape:
    return tuple(s * t.itemsize for s in t.strides)


def contiguous_byte_strides(shape: Shape, itemsize: int) -> Shape:
    return tuple(s * itemsize for s in contiguous_strides(shape))
