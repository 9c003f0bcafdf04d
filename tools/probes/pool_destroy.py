"""Does destroying a memory pool whose last free is still pending crash a later sync?

Two GPU runs (2026-12-01) segfaulted inside cuCtxSynchronize / cuStreamSynchronize in
the test worker that ran tests/transfers/test_memory_pool.py, whose pools are destroyed while the
stream-ordered free of their last allocation has not run yet (cuMemPoolDestroy says the
driver then releases the pool "once there are no more outstanding allocations"). This
repeats that pattern with the driver alone, then through cuasync, and prints how far it
got (a segfault ends the output early).
"""

import sys

from cuda.bindings import driver as d


def check(res):  # type: ignore[no-untyped-def]
    err = res[0] if isinstance(res, tuple) else res
    if int(err):
        raise RuntimeError(f"driver error {err}")
    return res[1] if isinstance(res, tuple) and len(res) == 2 else res


check(d.cuInit(0))
dev = check(d.cuDeviceGet(0))
ctx = check(d.cuDevicePrimaryCtxRetain(dev))
check(d.cuCtxSetCurrent(ctx))
stream = check(d.cuStreamCreate(1))
other = check(d.cuStreamCreate(1))


def new_pool(threshold: int):  # type: ignore[no-untyped-def]
    props = d.CUmemPoolProps()
    props.allocType = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    props.handleTypes = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
    props.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    props.location.id = 0
    pool = check(d.cuMemPoolCreate(props))
    attr = d.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
    check(d.cuMemPoolSetAttribute(pool, attr, d.cuuint64_t(threshold)))
    return pool


# argv[1]: "pending" destroys each pool with its free still pending; "landed" waits for
# the free first (cuStreamSynchronize: the control); "event" polls cuEventQuery on an
# event recorded after the free, then destroys; "cuasync" skips the driver-alone loop.
MODE = sys.argv[1] if len(sys.argv) > 1 else "pending"
for label, threshold in (("threshold max", (1 << 64) - 1), ("threshold 0", 0)):
    if MODE == "cuasync":
        break
    for i in range(2000):
        if i % 250 == 0:
            print(f"  {MODE}, {label}: iteration {i}", flush=True)
        pool = new_pool(threshold)
        ptr = check(d.cuMemAllocFromPoolAsync(8 << 20, pool, stream))
        check(d.cuMemsetD8Async(ptr, 1, 8 << 20, stream))
        check(d.cuMemFreeAsync(ptr, stream))
        if MODE == "landed":
            check(d.cuStreamSynchronize(stream))
        elif MODE == "event":
            event = check(d.cuEventCreate(d.CUevent_flags.CU_EVENT_DISABLE_TIMING))
            check(d.cuEventRecord(event, stream))
            while d.cuEventQuery(event)[0] == d.CUresult.CUDA_ERROR_NOT_READY:
                pass
            check(d.cuEventDestroy(event))
        check(d.cuMemPoolDestroy(pool))
        if i % 3 == 0:
            check(d.cuStreamSynchronize(other))
        if i % 7 == 0:
            check(d.cuCtxSynchronize())
    check(d.cuCtxSynchronize())
    print(f"driver alone, {MODE}, {label}: 2000 pools destroyed, no crash", flush=True)

import cuasync  # noqa: E402
import cuasync.testing  # noqa: E402
from cuasync.lowlevel import MemoryPool, use_memory_pool  # noqa: E402

device = cuasync.Device(0)
for i in range(1000):
    pool = MemoryPool(device, release_threshold=0 if i % 2 else None)
    with use_memory_pool(pool):
        t = cuasync.ones((1 << 20,), "float32").sync()
    del pool
    (t * 2).sync()
    del t  # the free is enqueued, then the pool is destroyed
    if i % 5 == 0:
        device.synchronize()
device.synchronize()
print("through cuasync: 1000 pools, no crash", flush=True)
sys.exit(0)
