"""Pending transfers between pinned host buffers and device tensors.

``upload_pending(buffer, tensor)`` and ``download_pending(tensor, buffer)`` enqueue one
copy at once and return a :class:`PendingTransfer`: ``is_ready()`` never waits, ``wait()``
blocks (outside event loops), ``await`` suspends the task; both hand back
``(tensor, buffer)``. The buffer is in flight until the copy is known to be done.

A refused submission raises :class:`~cuasync.errors.TransferRejected` before anything is
enqueued, with ``.package == (buffer, tensor)`` untouched. Dropping an unwaited handle is
safe: the copy keeps buffer and tensor alive until it completes, and its completion is
still observed so that they are released then.

>>> pending = cuasync.upload_pending(buf, tensor)
>>> ...                                  # the copy runs while the host does other work
>>> tensor, buf = await pending
"""

from __future__ import annotations

from typing import Any

from .._backends import get_backend
from .._core.completion import DONE, Completion
from .._core.context import ExecutionContext
from .._core.device import Stream
from .._core.op import DeviceFuture, device_op
from .._core.output import Output
from .._core.scheduling import current_policy, stream_from
from .._dtypes import dtype_name
from .._exceptions import fresh
from .._tensor import Tensor
from ..errors import (
    BusyTransferRejected,
    TransferRejected,
)
from .pinned import PinnedHostBuffer, _Flight

#: ``wait()`` spins on the completion flag for about twice the copy's expected time at
#: this (deliberately low) rate, plus a margin, before sleeping; never longer than the cap.
_WAIT_SPIN_RATE_BYTES_PER_US = 10_000  # 10 GB/s
_WAIT_SPIN_MARGIN_US = 50
_WAIT_SPIN_CAP_US = 10_000

__all__ = [
    "PendingTransfer",
    "download_pending",
    "upload_pending",
]


class PendingTransfer(DeviceFuture[tuple[Tensor, PinnedHostBuffer]]):
    """A copy in flight between a pinned buffer and a device tensor: a
    :class:`~cuasync.DeviceFuture` of ``(tensor, buffer)``.

    Cancellation: cancelling a task that awaits it raises ``CancelledError`` (trio:
    ``Cancelled``) at once and cancels the wait, not the copy: the buffer stays in flight
    (``buf.in_flight``; touching it raises :class:`~cuasync.errors.BusyResourceError`)
    until the copy lands, and the transfer can be awaited again. Collected unawaited, the
    copy finishes and the tensor and buffer are released once it lands.

    >>> pending = cuasync.download_pending(tensor, buf)
    >>> pending.is_ready()          # never waits; raises the device error if the copy failed
    >>> tensor, buf = await pending # or pending.wait() outside an event loop
    """

    __slots__ = ("_buffer", "_kind", "_tensor")

    def __init__(
        self, comp: Completion, kind: str, tensor: Tensor, buffer: PinnedHostBuffer
    ) -> None:
        super().__init__(comp)
        self._kind = kind
        self._tensor = tensor
        self._buffer = buffer

    @property
    def buffer(self) -> PinnedHostBuffer:
        """The pinned buffer being copied from or to (unusable until the copy lands)."""
        return self._buffer

    @property
    def tensor(self) -> Tensor:
        """The device tensor being copied to or from."""
        return self._tensor

    @property
    def kind(self) -> str:
        """``"upload_pending"`` or ``"download_pending"``."""
        return self._kind

    def is_ready(self) -> bool:
        """True once the copy has completed, False while it has not; never waits.

        Like :meth:`done`, but raises the device error (e.g.
        :class:`~cuasync.errors.DeviceFaultError`) if the copy failed, so "not yet" and
        "never" are told apart. A small copy may already be done at the first call.
        """
        if self.done():  # also looks for a device fault, so "never" is not "not yet"
            error = self._comp.error
            if error is not None:
                raise fresh(error)
            return True
        return False

    def wait(self, *, allow_in_loop: bool = False) -> tuple[Tensor, PinnedHostBuffer]:
        """Block until the copy is done; returns ``(tensor, buffer)``.

        The calling thread spins on the completion flag for about the copy's expected
        duration (at most 10 ms), then sleeps until the completion is reported.

        Raises :class:`~cuasync.errors.SyncInEventLoopError` inside a running event loop
        (``await`` the transfer there) unless ``allow_in_loop=True``.
        """
        return super().wait(allow_in_loop=allow_in_loop)

    def _wait_spin_us(self) -> int:
        # A blocking wait may burn this thread for about as long as the copy takes, as
        # cuStreamSynchronize does: it sees the flag land at once, where a sleep would
        # add the reactor's back-off and a thread wake-up to every transfer.
        budget = _WAIT_SPIN_MARGIN_US + 2 * self._buffer.nbytes // _WAIT_SPIN_RATE_BYTES_PER_US
        return min(budget, _WAIT_SPIN_CAP_US)

    def __repr__(self) -> str:
        comp = self._comp
        state = "pending" if comp.state < DONE else ("failed" if comp.error else "done")
        return (
            f"<cuasync.PendingTransfer {self._kind} {self._buffer.nbytes} B {state} "
            f"on {comp.stream!r}>"
        )


def _reject(kind: str, message: str, buffer: Any, tensor: Any) -> TransferRejected:
    return TransferRejected(f"{kind}: {message}", (buffer, tensor))


def _refusal(kind: str, buffer: Any, tensor: Any, upload: bool) -> TransferRejected | None:
    """Why ``(buffer, tensor)`` cannot be submitted, or None; nothing is touched."""
    if not isinstance(buffer, PinnedHostBuffer):
        other = (
            "cuasync.from_host(array) for a one-off copy"
            if upload
            else "tensor.to_host() or cuasync.download_into(tensor, out) for a numpy result"
        )
        return _reject(
            kind,
            f"buffer must be a cuasync.PinnedHostBuffer (page-locked memory the copy can use "
            f"without blocking the host), got {type(buffer).__module__}.{type(buffer).__name__}; "
            "take one from cuasync.PinnedPool.default().acquire(nbytes) and fill or read it "
            f"through .array(), or use {other}",
            buffer,
            tensor,
        )
    if not isinstance(tensor, Tensor):
        return _reject(
            kind,
            f"tensor must be a cuasync.Tensor, got {type(tensor).__name__}",
            buffer,
            tensor,
        )
    flight = buffer._busy
    if flight is not None and buffer.in_flight:
        return BusyTransferRejected(
            f"{kind}: {buffer!r} is already in flight: {flight.describe()} before submitting "
            "it again",
            (buffer, tensor),
        )
    if buffer._block is None:
        return _reject(kind, "the buffer was released; acquire another one", buffer, tensor)
    if buffer.dtype is not None and buffer.dtype != tensor.dtype:
        return _reject(
            kind,
            f"the buffer holds {dtype_name(buffer.dtype)} data but the tensor is "
            f"{dtype_name(tensor.dtype)}; use a buffer of dtype {dtype_name(tensor.dtype)} (or "
            "a raw one, dtype=None), or convert the tensor with cuasync.convert",
            buffer,
            tensor,
        )
    if buffer.nbytes != tensor.nbytes:
        return _reject(
            kind,
            f"the buffer holds {buffer.nbytes} bytes but the tensor (shape {tensor.shape}, "
            f"{dtype_name(tensor.dtype)}) has {tensor.nbytes}; sizes must match exactly: "
            f"use a buffer of {tensor.nbytes} bytes",
            buffer,
            tensor,
        )
    strides = tensor.strides
    if not (len(strides) == 1 and strides[0] == 1) and not tensor.is_contiguous:
        fix = (
            "upload into a contiguous tensor, then copy into the view with cuasync.memcpy"
            if upload
            else "make a contiguous copy with tensor.dup() first"
        )
        return _reject(
            kind,
            f"the tensor is a non-contiguous view (shape {tensor.shape}, strides {strides}) "
            f"and a pending transfer copies one contiguous range; {fix}",
            buffer,
            tensor,
        )
    return None


def _submit(
    kind: str, buffer: Any, tensor: Any, stream: Stream | None, upload: bool
) -> PendingTransfer:
    if not (  # the common case, checked inline; anything else gets the full diagnosis
        type(buffer) is PinnedHostBuffer
        and type(tensor) is Tensor
        and buffer._busy is None
        and buffer._block is not None
        and tensor.strides == (1,)
        and buffer.nbytes == tensor.shape[0] * tensor.dtype.itemsize
        and (buffer.dtype is None or buffer.dtype == tensor.dtype)
    ):
        refusal = _refusal(kind, buffer, tensor, upload)
        if refusal is not None:
            try:
                raise refusal
            finally:
                # The frame must not keep its own exception (frame -> exception ->
                # traceback -> frame): that cycle would keep the package alive until a
                # garbage collection.
                del refusal
    device = tensor._alloc.device
    if stream is None:
        stream = stream_from(current_policy(device), device)
    elif not isinstance(stream, Stream) or stream.device is not device:
        got = (
            f"a stream of device {stream.device.ordinal}"
            if isinstance(stream, Stream)
            else type(stream).__name__
        )
        raise _reject(
            kind,
            f"stream must be a cuasync.Stream of the tensor's device {device.ordinal}, got {got}",
            buffer,
            tensor,
        )
    block = buffer._block
    if block is None:  # released by another thread since the check
        raise _reject(kind, "the buffer was released; acquire another one", buffer, tensor)
    nbytes = buffer.nbytes
    alloc = tensor._alloc
    offset = tensor.offset * tensor.itemsize
    address = block.address
    backend = get_backend()
    flight = _Flight(kind, stream)

    def done() -> tuple[Tensor, PinnedHostBuffer]:
        if buffer._busy is flight:
            buffer._busy = None
        return (tensor, buffer)

    def enqueue(ctx: ExecutionContext) -> Output[tuple[Tensor, PinnedHostBuffer]]:
        # Checked again under the execution lock: another thread may have submitted the
        # buffer since the check above.
        other = buffer._busy
        if other is not None and buffer.in_flight:
            raise BusyTransferRejected(
                f"{kind}: {buffer!r} was submitted by another thread meanwhile: {other.describe()}",
                (buffer, tensor),
            )
        if upload:
            ptr = ctx.write(alloc, "tensor") + offset
            if nbytes:
                backend.memcpy_htod_async(ptr, address, nbytes, ctx.handle)
        else:
            ptr = ctx.read(alloc, "tensor") + offset
            if nbytes:
                backend.memcpy_dtoh_async(address, ptr, nbytes, ctx.handle)
        buffer._busy = flight
        ctx.retain(block)  # even if the buffer is released meanwhile
        return Output(done)

    op = device_op(enqueue, device, kind)
    op._take()
    try:
        comp = op._start(stream, True)
    except BaseException as exc:
        if buffer._busy is flight:
            flight.error = exc  # the copy was enqueued: the buffer stays unusable
        raise
    flight.comp = comp
    return PendingTransfer(comp, kind, tensor, buffer)


def upload_pending(
    buffer: PinnedHostBuffer, tensor: Tensor, *, stream: Stream | None = None
) -> PendingTransfer:
    """Enqueue a copy of ``buffer`` into the existing device ``tensor`` now.

    The buffer must hold exactly ``tensor.nbytes`` bytes (and, if typed, the tensor's
    dtype); the tensor must be contiguous. The copy runs on ``stream`` (default: the
    policy's next stream for the tensor's device); later ops using the tensor are ordered
    after it automatically. Refusals raise :class:`~cuasync.errors.TransferRejected`
    with ``.package == (buffer, tensor)``.

    >>> buf.array()[:] = batch
    >>> tensor, buf = await cuasync.upload_pending(buf, tensor)
    """
    return _submit("upload_pending", buffer, tensor, stream, True)


def download_pending(
    tensor: Tensor, buffer: PinnedHostBuffer, *, stream: Stream | None = None
) -> PendingTransfer:
    """Enqueue a copy of the device ``tensor`` into ``buffer`` now.

    Same rules as :func:`upload_pending`; read the buffer once the transfer is done.

    >>> tensor, buf = await cuasync.download_pending(tensor, buf)
    >>> result = buf.array("float32", tensor.shape).copy()
    """
    return _submit("download_pending", buffer, tensor, stream, False)
