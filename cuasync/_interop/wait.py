"""``cuasync.wait``: await work that another library enqueued on its stream or event.

The completion flag is enqueued on the foreign stream itself (for an event: on a
cuasync stream made to wait for it), so the foreign stream is never blocked, the loop
is never blocked, and cancelling the awaiting task leaves the foreign work untouched.

>>> y = model(x)                                        # torch enqueues on its stream
>>> await cuasync.wait(torch.cuda.current_stream())     # the loop keeps running
"""

from __future__ import annotations

from typing import Any

from .._backends import get_backend
from .._core.context import ExecutionContext
from .._core.device import Device, Event, Stream, _check_ordinal, get_default_device
from .._core.op import DeviceOp
from .._core.output import Output
from ..errors import ArgumentError, CaptureError
from .foreign import LEGACY_STREAM, foreign_stream, wait_for_foreign

__all__ = ["wait"]


class _Wait(DeviceOp[None]):
    """Completes when the work enqueued on a stream (or before an event) is done."""

    __slots__ = ("_event", "_owner", "_stream")

    def __init__(
        self, stream: Stream | None, event: int | None, owner: Any, device: Device
    ) -> None:
        super().__init__(device)
        self._stream = stream
        self._event = event
        self._owner = owner

    def _pick_stream(self) -> Stream:
        # A stream's flag goes on that very stream; an event is waited for on the policy's.
        return self._stream if self._stream is not None else super()._pick_stream()

    def _enqueue(self, ctx: ExecutionContext) -> Output[None]:
        backend = get_backend()
        target = self._stream
        # First, before anything is enqueued or retained: a failed submission that
        # retained something would enqueue its release on the capturing stream.
        if target is not None and backend.stream_is_capturing(target.handle):
            raise CaptureError(
                f"stream {target.handle:#x} is capturing a CUDA graph; its work only runs when "
                "the graph is launched: await the launch instead (or wait once capture ended)"
            )
        if self._owner is not None:
            ctx.retain(self._owner)
        if target is None:
            if self._event:  # 0: a torch event never recorded, nothing to wait for
                backend.stream_wait_event(ctx.handle, self._event)
        elif ctx.stream is not target:  # submit_on() another stream: it waits for the target
            wait_for_foreign(ctx.stream, target.handle)
        return Output.ready(None)

    def __repr__(self) -> str:
        what = f"event {self._event:#x}" if self._event is not None else repr(self._stream)
        return f"<cuasync.DeviceOp wait for {what}{' (consumed)' if self._consumed else ''}>"


def _handle(value: Any) -> int:
    handle = int(value)
    return LEGACY_STREAM if handle == 0 else handle  # NULL is the legacy default stream


def _device(device: int | Device | None) -> Device:
    return get_default_device() if device is None else Device(_check_ordinal(device, "device"))


def wait(x: Stream | Event | int | object, *, device: int | Device | None = None) -> DeviceOp[None]:
    """An op that completes when the work enqueued on ``x`` so far is done.

    ``x`` is a cuasync :class:`Stream` or :class:`Event`, an object with
    ``__cuda_stream__``, a ``torch.cuda.Stream`` or ``Event``, a ``cupy.cuda.Stream``
    or ``Event``, or an int stream handle (0 is the legacy default stream). "So far"
    is when the op is executed (awaited, submitted), as with any op. For an event, its
    latest record counts, and ``device`` picks the cuasync stream that waits for it
    (default: the current device). The foreign stream is never blocked; cancelling
    the awaiting task leaves the foreign work untouched. A foreign stream that is being
    captured into a graph is refused with :class:`~cuasync.errors.CaptureError`.

    >>> out = model(x)                                   # torch work, on its stream
    >>> await cuasync.wait(torch.cuda.current_stream())  # the loop stays responsive
    """
    if isinstance(x, Stream):
        return _Wait(x, None, None, x.device)
    if isinstance(x, Event):
        return _Wait(None, x.handle, x, x.device if device is None else _device(device))
    if hasattr(x, "__cuda_stream__"):
        stream = Stream.from_handle(x)
        return _Wait(stream, None, x, stream.device)
    module = type(x).__module__.split(".")[0]
    name = type(x).__name__
    if hasattr(x, "cuda_stream") and module == "torch":  # torch.cuda.Stream
        return _foreign_stream(_handle(x.cuda_stream), x)
    if hasattr(x, "cuda_event") and module == "torch":  # torch.cuda.Event
        return _Wait(None, int(x.cuda_event), x, _device(device))
    if hasattr(x, "ptr") and module == "cupy":
        if "Event" in name:
            return _Wait(None, int(x.ptr), x, _device(device))
        if "Stream" in name:
            return _foreign_stream(_handle(x.ptr), x)
    if isinstance(x, int) and not isinstance(x, bool):
        if x < 0:
            raise ArgumentError(f"a stream handle must be >= 0, got {x}")
        return _foreign_stream(_handle(x), None)
    raise ArgumentError(
        "wait() takes a cuasync.Stream or Event, an object with __cuda_stream__, a torch or "
        f"CuPy stream or event, or an int stream handle; got {type(x).__name__}"
    )


def _foreign_stream(handle: int, owner: Any) -> _Wait:
    stream = foreign_stream(handle, Device(get_backend().stream_device(handle)), owner)
    return _Wait(stream, None, owner, stream.device)
