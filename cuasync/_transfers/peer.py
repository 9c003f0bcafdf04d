"""Copies between devices, under :func:`cuasync.memcpy` across devices and :meth:`Tensor.to`.

Two routes, chosen per pair of devices:

* **peer**: where the two devices can reach each other (``Device.can_access_peer``,
  both ways), cuasync enables peer access for the pair on first use (both directions,
  the stream-ordered pools included) and the destination's stream copies device to
  device (``cuMemcpyPeerAsync``);
* **staged**: otherwise (or with ``CUASYNC_PEER=off``) a stream of the source device
  copies into a pinned host block, and the destination's stream copies the block on
  once an event of the source stream says the first half is done. Nothing blocks the
  calling thread.

The copy is an op of the destination device: it runs on a stream of that device's
policy, so later uses of the destination are ordered after it like those of any op.
Its read of the source waits, through an event of the source's device, for pending
writes to the source; later writers of the source wait for the copy. A strided source
is first made contiguous on its own device; a strided destination is written through a
contiguous temporary on its own.

Cross-device copies cannot be recorded into CUDA graphs (the staged route needs a
second stream, and graph launches re-declare every tensor on the graph's device).
"""

from __future__ import annotations

import functools

from .._backends import get_backend
from .._config import CONFIG
from .._core.context import ExecutionContext
from .._core.device import Device
from .._core.memory import Allocation
from .._core.output import Output
from .._core.scheduling import stream_from
from .._exceptions import fresh
from .._tensor import Tensor
from ..errors import CaptureError
from .device_copy import (
    byte_strides,
    contiguous_byte_strides,
    copy_strided,
    kernel_copy,
    memcpy_able,
    new_tensor,
)
from .staging import staging_pool

__all__ = ["copy_between_devices", "peer_route"]


def peer_route(src: Device, dst: Device) -> bool:
    """Whether copies between ``src`` and ``dst`` go device to device.

    Enables peer access for the pair, both directions, the first time it is asked; the
    backend remembers, so later calls are a few dictionary lookups.
    """
    if CONFIG.peer == "off":
        return False
    backend = get_backend()
    a, b = src.ordinal, dst.ordinal
    if not (backend.device_can_access_peer(a, b) and backend.device_can_access_peer(b, a)):
        return False
    backend.enable_peer_access(a, b)
    backend.enable_peer_access(b, a)
    return True


def copy_between_devices(ctx: ExecutionContext, dst: Tensor, src: Tensor) -> Output[Tensor]:
    """Enqueue on ``ctx`` (a stream of ``dst``'s device) a copy of ``src``, which lives on
    another device, into ``dst``; outputs ``dst``.

    The caller has checked dtypes and sizes, and that the shapes are equal or both
    tensors contiguous.
    """
    if ctx.capturing:
        raise CaptureError(
            f"a copy from device {src.device.ordinal} to device {dst.device.ordinal} cannot be "
            "recorded into a CUDA graph; copy before capturing, or record per-device graphs"
        )
    _check_alive(src.device)
    if dst.is_contiguous:
        landing = ctx.write(dst.allocation, "dst") + _byte_offset(dst)
        temp = None
    else:  # land contiguous on dst's device, then scatter into the view there
        temp = new_tensor(ctx, dst.shape, dst.dtype, "memcpy")
        landing = temp.ptr
    if src.nbytes:
        if peer_route(src.device, dst.device):
            _copy_peer(ctx, landing, src)
        else:
            _copy_staged(ctx, landing, src)
    if temp is not None:
        strides = contiguous_byte_strides(dst.shape, dst.itemsize)
        dp = ctx.write(dst.allocation, "dst") + _byte_offset(dst)
        copy_strided(ctx, "dtod", dp, byte_strides(dst), temp.ptr, strides, dst.shape, dst.itemsize)
    return Output(functools.partial(_delivered, src.device, dst))


def _copy_peer(ctx: ExecutionContext, landing: int, src: Tensor) -> None:
    """Device to device, on the destination's stream."""
    if src.is_contiguous:
        alloc, ptr = src.allocation, src.ptr
    else:  # the read below waits for the side stream that writes the temporary
        tight = _contiguous_on(_source_side(ctx, src.device), src)
        alloc, ptr = tight.allocation, tight.ptr
    _read_from_peer(ctx, alloc)
    get_backend().memcpy_peer_async(
        landing, ctx.device.ordinal, ptr, src.device.ordinal, src.nbytes, ctx.handle
    )


def _copy_staged(ctx: ExecutionContext, landing: int, src: Tensor) -> None:
    """Through pinned host memory: the source's stream downloads, ours uploads after it."""
    backend = get_backend()
    side = _source_side(ctx, src.device)
    if src.is_contiguous:
        ptr = side.read(src.allocation, "src") + _byte_offset(src)
    else:
        ptr = _contiguous_on(side, src).ptr
    block = staging_pool().acquire(src.nbytes)
    ctx.retain(block)  # until the upload has landed, which is after the download
    backend.memcpy_dtoh_async(block.address, ptr, src.nbytes, side.handle)
    ctx.stream._order_after(side.stream, side.seq)
    backend.memcpy_htod_async(landing, block.address, src.nbytes, ctx.handle)


def _source_side(ctx: ExecutionContext, device: Device) -> ExecutionContext:
    """An execution context on a stream of ``device``'s own policy for the source half of
    a copy; ``ctx`` keeps everything it uses alive until the copy has landed."""
    stream = stream_from(device.policy, device)
    if stream._capturing:
        raise CaptureError(
            f"the source half of a copy from device {device.ordinal} would run on stream "
            f"{stream.handle:#x}, which is capturing a graph; end the capture first"
        )
    side = ExecutionContext(stream)
    ctx.retain(side)
    return side


def _contiguous_on(side: ExecutionContext, src: Tensor) -> Tensor:
    """A contiguous copy of ``src`` made on ``side``'s stream (``src``'s device)."""
    tight = new_tensor(side, src.shape, src.dtype, "memcpy")
    if not memcpy_able(src):  # a reversed or broadcast view: a kernel gathers it
        kernel_copy(side, tight, src)
        return tight
    sp = side.read(src.allocation, "src") + _byte_offset(src)
    strides = contiguous_byte_strides(src.shape, src.itemsize)
    copy_strided(side, "dtod", tight.ptr, strides, sp, byte_strides(src), src.shape, src.itemsize)
    return tight


def _read_from_peer(ctx: ExecutionContext, alloc: Allocation) -> None:
    """``ctx.read`` for memory of another device: ordered after its pending writers (an
    event of their stream), recorded so that later writers and the free wait for us."""
    alloc.use(ctx.stream, ctx.seq, write=False)
    ctx.retain(alloc)


def _check_alive(device: Device) -> None:
    fault = device.fault
    if fault is not None:
        raise fresh(fault)


def _delivered(source: Device, dst: Tensor) -> Tensor:
    # A source device that faulted before the copy read it never wrote what was awaited;
    # the destination's stream cannot tell (its wait for the source's event just ends).
    _check_alive(source)
    return dst


def _byte_offset(t: Tensor) -> int:
    return t.offset * t.itemsize
