"""Marks: a cancellable kernel that records that it ran, to observe skipped work.

``mark(marks, i)`` adds 1 to ``marks[i]`` (a uint32 tensor) unless the cancel scope it
was launched in is cancelled by the time it starts: a test queues marks behind a gate
inside a scope, cancels the scope, opens the gate and reads which marks moved. The
kernel checks its word through ``cuasync/cancel.cuh``, as a user kernel does; the
emulator skips its twin the same way.

>>> await cuasync.testing.mark(marks, 0)   # its kernel loaded before the gate (testing.md)
>>> with cuasync.testing.gate():
...     with cuasync.cancel_scope() as scope:
...         task = asyncio.create_task(cuasync.testing.mark(marks, 0).__await__())
...     scope.cancel()
"""

from __future__ import annotations

import functools
from typing import Any

from .._core.device import Device
from .._core.op import DeviceOp
from .._launch.kernel import Kernel
from .._tensor import Tensor
from ..errors import ArgumentError

__all__ = ["mark"]

_SOURCE = r"""
#include <cuasync/cancel.cuh>
__global__ void cuasync_mark(unsigned int* marks, long long index) {
    if (cuasync_block_cancelled()) return;
    if (threadIdx.x == 0) marks[index] += 1;
}
"""


def _twin(marks: Any, index: Any) -> None:
    marks[int(index)] += 1


@functools.cache
def _kernel() -> Kernel:
    return Kernel(_SOURCE, "cuasync_mark", emulate=_twin)


def load(device: Device | None = None) -> None:
    """Compile and load the mark kernel on ``device`` (before a gate holds its streams)."""
    _kernel().compile(device)


def mark(marks: Tensor, index: int) -> DeviceOp[Tensor]:
    """An op adding 1 to ``marks[index]`` (uint32) unless its cancel scope is cancelled
    when it starts on the device: what ran and what was skipped, on both backends. Its
    kernel loads at the first mark built on a device: build (or run) one before closing
    a gate (a first load waits for a closed gate on a GPU; the emulator refuses it).

    >>> marks = cuasync.zeros((4,), "uint32").sync()
    >>> await cuasync.testing.mark(marks, 2)
    """
    if not isinstance(marks, Tensor) or marks.dtype.name != "uint32" or marks.ndim != 1:
        raise ArgumentError("marks must be a one-dimensional uint32 cuasync.Tensor")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < marks.size:
        raise ArgumentError(f"index must be an int in [0, {marks.size}), got {index!r}")
    load(marks.device)
    op: DeviceOp[Tensor] = _kernel()[1, 32](marks, index)
    return op
