"""``download_into``: blocking readback into a numpy array the caller reuses.

The copy goes device → pooled pinned blocks → ``out``, so a loop that reads the same
size back each step allocates and page-faults nothing. From 1 MiB up (contiguous tensor
and ``out``) it goes in chunks, each copied out on cuasync's copy threads as soon as its
DMA lands (see :mod:`._pageable`). With ``resize=True`` an array
of another size is resized in place first (:meth:`numpy.ndarray.resize` and its
reference check).

>>> out = np.empty(0, np.float32)
>>> for step in range(n):
...     cuasync.download_into(result, out, resize=True)   # grows once, then reuses
"""

from __future__ import annotations

import sys

import numpy as np

from ._copies import copy_strided
from ._core.context import ExecutionContext
from ._core.loops import check_blocking_allowed
from ._core.op import device_op
from ._core.output import Output
from ._dtypes import dtype_name
from ._pageable import download_chunked, download_route
from ._pinned import PinnedPool
from ._tensor import Tensor, contiguous_strides
from .errors import ArgumentError, DTypeError, ShapeError

__all__ = ["download_into"]


def _refs(out: object) -> int:
    return sys.getrefcount(out)


def _calibrate() -> int:
    probe = np.empty(1)
    return _refs(probe)


#: What ``sys.getrefcount(out)`` says inside a function's frame when the caller holds
#: ``out`` in one variable: more means a view, another name or a container holds it too.
_ONE_HOLDER = _calibrate()


def download_into(
    tensor: Tensor,
    out: np.ndarray,
    *,
    resize: bool = False,
    refcheck: bool = True,
    allow_in_loop: bool = False,
) -> np.ndarray:
    """Copy ``tensor`` into the existing numpy array ``out`` and return ``out``; blocking.

    For repeated readback of same-size results: ``out`` is reused, so the loop allocates
    and page-faults nothing; the copy goes through a pooled pinned buffer. ``out`` must be
    writable with the tensor's dtype and element count (its shape may differ); the tensor
    may be a strided view. Raises :class:`~cuasync.errors.SyncInEventLoopError` inside a
    running event loop (``await tensor.to_host()`` there) unless ``allow_in_loop=True``.

    ``resize=True`` accepts an ``out`` of another element count and resizes it in place
    to the tensor's shape first, as ``out.resize(tensor.shape)`` would: only an array that
    owns its memory and is C-contiguous, and (``refcheck``, numpy's rule) is referenced
    from one place only, where you pass it from: a view of it or a second name makes the
    resize refused. numpy's own check cannot tell that from inside a call, so cuasync
    counts for it. ``refcheck=False`` skips it; you then vouch that no view of ``out``
    exists, since resizing may move its memory. Otherwise
    :class:`~cuasync.errors.ShapeError` says why.

    A ``bool`` tensor is allowed: cuasync's bool tensors hold 0/1 bytes by construction
    (see the Transfers guide).

    >>> out = np.empty((1024,), np.float32)
    >>> for step in range(n): cuasync.download_into(result, out)
    >>> cuasync.download_into(bigger, out, resize=True).shape   # resized in place
    (4096,)
    """
    held = sys.getrefcount(out)  # first, before this frame makes any other reference
    check_blocking_allowed("cuasync.download_into()", allow_in_loop)
    if not isinstance(tensor, Tensor):
        raise ArgumentError(f"tensor must be a cuasync.Tensor, got {type(tensor).__name__}")
    if not isinstance(out, np.ndarray):
        raise ArgumentError(
            f"out must be a numpy.ndarray to copy into, got {type(out).__name__}; "
            "use tensor.to_host() for a new array"
        )
    if out.dtype != tensor.dtype:
        raise DTypeError(
            f"out is {out.dtype} but the tensor is {dtype_name(tensor.dtype)}; pass an array "
            f"of dtype {dtype_name(tensor.dtype)}"
        )
    if not out.flags.writeable:
        raise ArgumentError("out is read-only; pass a writable array")
    if out.size != tensor.size:
        if not resize:
            raise ShapeError(
                f"out has {out.size} elements {out.shape} but the tensor has {tensor.size} "
                f"{tensor.shape}; pass an array with the same number of elements, or "
                "resize=True to resize out in place"
            )
        _resize(out, tensor, held > _ONE_HOLDER if refcheck else False)
    _copy(tensor, out)
    return out


def _resize(out: np.ndarray, tensor: Tensor, referenced: bool) -> None:
    """``out.resize(tensor.shape)`` in place, or a ShapeError saying why it cannot be."""
    why = ""
    if not out.flags.owndata:
        why = (
            "it does not own its memory (it is a view, or memory another object manages, "
            "such as a to_host() result)"
        )
    elif not out.flags.c_contiguous:
        why = "it is not C-contiguous"
    elif referenced:
        why = (
            "it is referenced from more than the one place you pass it from (a view of it, "
            "or a second name): resizing may move its memory under them; drop those "
            "references, or pass refcheck=False if no view of it exists"
        )
    if why:
        raise ShapeError(
            f"out has {out.size} elements {out.shape}, the tensor {tensor.size} "
            f"{tensor.shape}, and out cannot be resized in place: {why}; otherwise pass "
            "an array with the tensor's element count"
        )
    out.resize(tensor.shape, refcheck=False)  # realloc: in place when the allocator can


def _copy(t: Tensor, out: np.ndarray) -> None:
    if (
        t.is_contiguous
        and out.flags.c_contiguous
        and download_route(t.nbytes, t.device) == "chunked"
    ):
        download_chunked(t, out)
        return
    itemsize = t.itemsize
    block = PinnedPool.default()._blocks.acquire(t.nbytes)
    address = block.address

    def enqueue(ctx: ExecutionContext) -> Output[None]:
        src = ctx.read(t.allocation, "tensor") + t.offset * itemsize
        copy_strided(
            ctx,
            "dtoh",
            address,
            tuple(s * itemsize for s in contiguous_strides(t.shape)),
            src,
            tuple(s * itemsize for s in t.strides),
            t.shape,
            itemsize,
        )
        ctx.retain(block)
        return Output.ready(None)

    device_op(enqueue, t.device, "download_into").sync(allow_in_loop=True)
    staged = block.array(t.dtype, t.shape)
    if staged.shape != out.shape:
        staged = staged.reshape(out.shape)
    np.copyto(out, staged)
