"""The plumbing under :mod:`cuasync`: for writing custom ops and talking to the driver.

An application rarely needs it. A custom op is a function ``fn(ctx) -> Output`` that
enqueues its work on ``ctx.stream`` and declares the device memory it reads and writes,
so cuasync can order it after, and keep its inputs alive until, the work it depends on.

>>> from cuasync import lowlevel
>>> def enqueue(ctx: lowlevel.ExecutionContext) -> lowlevel.Output[Tensor]:
...     src_ptr = ctx.read(src.allocation)     # ordered after src's writers
...     dst_ptr = ctx.write(dst.allocation)    # ... and dst's readers and writers
...     my_library.copy(dst_ptr, src_ptr, src.nbytes, stream=ctx.handle)
...     return lowlevel.Output.ready(dst)
>>> await lowlevel.device_op(enqueue, name="my_copy")

``DevicePointer(address)`` passes a raw device address (memory cuasync does not track)
to a kernel's pointer parameter. ``MemoryPool`` and ``use_memory_pool`` allocate from a
pool of its own instead of the device's default one (see docs/memory.md).
"""

from __future__ import annotations

from ._core.context import ExecutionContext as ExecutionContext
from ._core.op import device_op as device_op
from ._core.output import Output as Output
from ._core.pools import MemoryPool as MemoryPool
from ._core.pools import use_memory_pool as use_memory_pool
from ._launch.kernel import DevicePointer as DevicePointer

__all__ = [
    "DevicePointer",
    "ExecutionContext",
    "MemoryPool",
    "Output",
    "device_op",
    "use_memory_pool",
]
