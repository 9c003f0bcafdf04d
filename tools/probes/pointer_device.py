"""What does the driver say about the device of a pointer on device 1 (needs 2 GPUs)?

Asks ``cuPointerGetAttribute`` for DEVICE_ORDINAL, CONTEXT and MEMPOOL_HANDLE of a
stream-ordered (pool) allocation and of a ``cuMemAlloc`` allocation on device 1, from a
thread whose current context is device 0's and from one with no current context.
"""

import threading

from cuda.bindings import driver as d

import cuasync
from cuasync._backends import get_backend

A = d.CUpointer_attribute
ATTRIBUTES = (
    "CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL",
    "CU_POINTER_ATTRIBUTE_CONTEXT",
    "CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE",
    "CU_POINTER_ATTRIBUTE_MEMORY_TYPE",
)


def ask(label: str, ptr: int) -> None:
    for name in ATTRIBUTES:
        err, value = d.cuPointerGetAttribute(getattr(A, name), ptr)
        print(f"  {label:28} {name[22:]:16} err={int(err):4d} value={value!r}")


t = cuasync.zeros((4,), device=1).sync()
cuasync.zeros((4,), device=0).sync()  # device 0 current on this thread
pools = [d.cuDeviceGetDefaultMemPool(d.CUdevice(i))[1] for i in range(2)]
print("default pools:", pools)
ask("pool, ctx 0 current", t.ptr)
print("backend pointer_device:", get_backend().pointer_device(t.ptr))
d.cuCtxSetCurrent(d.CUcontext(0))
ask("pool, no current ctx", t.ptr)
thread = threading.Thread(target=ask, args=("pool, fresh thread", t.ptr))
thread.start()
thread.join()
err, ctx1 = d.cuDevicePrimaryCtxRetain(d.CUdevice(1))
d.cuCtxSetCurrent(ctx1)
err, raw = d.cuMemAlloc(64)
d.cuCtxSetCurrent(d.CUcontext(0))
ask("cuMemAlloc, no current ctx", int(raw))
