"""Device ops for tests: :func:`sleep` keeps a stream busy, :func:`trap` faults the device.

Both are real kernels on a GPU (``kernels.cu`` beside this module) and numpy twins on the
emulator, so a test written with them runs unchanged on both backends.
"""

from __future__ import annotations

import functools
import math
import time
from importlib import resources
from typing import Any, TypeVar

from .._backends.base import EmulatedTrap
from .._core.context import ExecutionContext
from .._core.device import Device, Stream
from .._core.op import DeviceOp
from .._core.output import Output
from .._launch.kernel import Kernel, program_kernels
from ..errors import ArgumentError

__all__ = ["sleep", "trap"]

T = TypeVar("T")


@functools.cache
def _source() -> str:
    return resources.files(__package__).joinpath("kernels.cu").read_text()


def _sleep_twin(ns: Any) -> None:
    time.sleep(int(ns) / 1e9)  # the emulated device is busy: its stream worker waits


def _trap_twin() -> None:
    raise EmulatedTrap("emulated kernel executed __trap() (cuasync.testing.trap)")


@functools.cache
def _kernels() -> tuple[Kernel, Kernel]:
    kernels = program_kernels(_source(), {"cuasync_sleep": _sleep_twin, "cuasync_trap": _trap_twin})
    return kernels["cuasync_sleep"], kernels["cuasync_trap"]


def load(device: Device | None = None) -> None:
    """Compile and load the sleep and trap kernels on ``device`` (default: the default one).

    On a GPU, loading a module waits for the device's pending work: loading one while a
    gate holds a stream would wait for the gate, and loading the trap's while a sleep op
    runs would wait for the sleep. So both are loaded together, before either is used.
    """
    for kernel in _kernels():
        kernel.compile(device)


class _OnStream(DeviceOp[T]):
    """``op``, executed on ``stream`` by ``await``, ``sync()`` and ``submit()``."""

    __slots__ = ("_inner", "_stream")

    def __init__(self, inner: DeviceOp[T], stream: Stream) -> None:
        super().__init__(stream.device)
        inner._take()
        self._inner = inner
        self._stream = stream

    def _pick_stream(self) -> Stream:
        return self._stream

    def _enqueue(self, ctx: ExecutionContext) -> Output[T]:
        return self._inner._enqueue(ctx)


def _on(op: DeviceOp[T], stream: Stream | None) -> DeviceOp[T]:
    if stream is None:
        return op
    if not isinstance(stream, Stream):
        raise ArgumentError(f"stream must be a cuasync.Stream or None, got {type(stream).__name__}")
    return _OnStream(op, stream)


def sleep(us: float, stream: Stream | None = None) -> DeviceOp[None]:
    """An op that keeps the device busy for ``us`` microseconds (one thread, on its stream).

    Work submitted after it on the same stream waits behind it, so a test can hold work
    in flight for a known time on a GPU (``%globaltimer``) and on the emulator alike.
    ``stream`` pins the op to a stream; by default it runs where it is executed.

    >>> fut = cuasync.testing.sleep(50_000).submit()     # 50 ms of device time
    >>> fut.done()
    False
    """
    if isinstance(us, bool) or not isinstance(us, (int, float)) or not math.isfinite(us) or us < 0:
        raise ArgumentError(f"us must be a finite number of microseconds >= 0, got {us!r}")
    ns = round(us * 1000)
    if ns >= 1 << 63:
        raise ArgumentError(f"us={us!r} is too long for a sleep op")
    load(None if stream is None else stream.device)
    op: DeviceOp[None] = _kernels()[0][1, 1](ns)
    return _on(op, stream)


def trap(stream: Stream | None = None) -> DeviceOp[None]:
    """An op whose kernel executes ``__trap()``: the device faults for the whole process.

    Every pending and later op on that device fails with
    :class:`cuasync.errors.DeviceFaultError`, as after any real kernel fault. Run it in a
    subprocess (the fault is sticky until the process exits). On the emulator it faults
    the emulated device the same way.

    >>> with pytest.raises(cuasync.errors.DeviceFaultError):
    ...     await cuasync.testing.trap()
    """
    load(None if stream is None else stream.device)
    op: DeviceOp[None] = _kernels()[1][1, 1]()
    return _on(op, stream)
