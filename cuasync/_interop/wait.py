"""``cuasync.wait``: await work that another library enqueued on its stream or event.

The completion flag is enqueued on the foreign stream itself (for an event: on a
cuasync stream made to wait for it), so the foreign stream is never blocked, the loop
is never blocked, and cancelling the awaiting task leaves the foreign work untouched.
A wait is a library call (:mod:`cuasync._launch.library_call`) whose work is nothing on
the stream waited for (the flag after it is the wait): the native core submits and
awaits it as it does a kernel launch, on that stream (the op's ``_stream``).

>>> y = model(x)                                        # torch enqueues on its stream
>>> await cuasync.wait(torch.cuda.current_stream())     # the loop keeps running
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._backends import get_backend
from .._core.completion import get_hub
from .._core.context import ExecutionContext
from .._core.device import Device, Event, Stream, _check_ordinal, get_default_device
from .._core.op import DeviceOp
from .._core.output import Output
from .._launch.library_call import Calls, LibraryCall, library_call
from ..errors import ArgumentError, CaptureError
from .foreign import LEGACY_STREAM, foreign_stream, wait_for_foreign_handle

__all__ = ["wait"]


def _wait_work(stream: int, args: tuple[Any, ...], errors: Callable[[], list[Any]]) -> None:
    """A wait's work on ``stream`` (a handle): nothing where it is the stream waited for
    (the flag after it is the wait); another stream waits for that stream's work so far
    (``submit_on`` another), or for the event. A stream being captured into a graph is
    refused before anything is enqueued (its work only runs when the graph does)."""
    target, event, _owner = args
    backend = get_backend()
    if target is not None:
        _refuse_capturing(target)
        if stream != target.handle:  # (a stream of the op's device: the target's)
            wait_for_foreign_handle(target.device.ordinal, stream, target.handle)
    elif event:  # (0: a torch event never recorded, nothing to wait for)
        backend.stream_wait_event(stream, event)


def _refuse_capturing(target: Stream) -> None:
    """Raise :class:`CaptureError` where ``target`` is being captured into a graph."""
    if get_backend().stream_is_capturing(target.handle):
        raise CaptureError(
            f"stream {target.handle:#x} is capturing a CUDA graph; its work only runs when "
            "the graph is launched: await the launch instead (or wait once capture ended)"
        )


#: The wait as a library call, per device ordinal.
_WAIT_CALLS = Calls("wait", _wait_work)


class _Wait(LibraryCall):
    """Completes when the work enqueued on a stream (or before an event) is done: its
    arguments ``(stream or None, event handle or None, owner)``; an await runs it on the
    stream (``_stream``), or for an event on the policy's."""

    __slots__ = ()

    def _enqueue(self, ctx: ExecutionContext) -> Output[Any]:
        # The work first (it refuses a capturing stream): a failed submission that had
        # retained something would enqueue its release on the capturing stream.
        output = super()._enqueue(ctx)
        owner = self._args[2]
        if owner is not None:  # (the foreign object, until the work has landed; the core's
            ctx.retain(owner)  # path holds a stream's through the stream, and an event's
        return output  # record is the driver's once waited for)

    def __repr__(self) -> str:
        stream = self._stream
        if stream is not None:
            what = repr(stream)
        else:  # (an event's; its arguments are gone once a cancelled await let go of them)
            event = self._args[1] if self._args else None
            what = "an event" if event is None else f"event {event:#x}"
        return f"<cuasync.DeviceOp wait for {what}{' (consumed)' if self._consumed else ''}>"


def wake_key(stream: Stream) -> Any:
    """What an await of ``wait(stream)`` learns its work's length by (``cuasync._core.wake``):
    the wait's call on the stream's device and the stream's handle, where the native core
    awaits it; the stream's handle on the generic path (no core: ``CUASYNC_NATIVE=off``,
    host callbacks), as any generic op's.

    >>> wake.estimate(wake_key(stream))       # ns from parking to landing, or None
    """
    if get_hub().express is None:  # (the hub made now, where no op has run yet)
        return stream.handle
    return (_WAIT_CALLS.on(stream.device.ordinal), stream.handle)


def _wait(stream: Stream | None, event: int | None, owner: Any, device: Device) -> _Wait:
    key = stream.handle if stream is not None else event  # (the early wake's: wake_key)
    op = library_call(
        _WAIT_CALLS.on(device.ordinal), device, (stream, event, owner), (), (), None, key, _Wait
    )
    op._stream = stream
    return op


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
        return _wait(x, None, None, x.device)
    if isinstance(x, Event):
        return _wait(None, x.handle, x, x.device if device is None else _device(device))
    if hasattr(x, "__cuda_stream__"):
        stream = Stream.from_handle(x)
        return _wait(stream, None, x, stream.device)
    module = type(x).__module__.split(".")[0]
    name = type(x).__name__
    if hasattr(x, "cuda_stream") and module == "torch":  # torch.cuda.Stream
        return _foreign_stream(_handle(x.cuda_stream), x)
    if hasattr(x, "cuda_event") and module == "torch":  # torch.cuda.Event
        return _wait(None, int(x.cuda_event), x, _device(device))
    if hasattr(x, "ptr") and module == "cupy":
        if "Event" in name:
            return _wait(None, int(x.ptr), x, _device(device))
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
    return _wait(stream, None, owner, stream.device)
