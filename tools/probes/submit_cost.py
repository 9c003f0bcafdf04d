"""Where the host time of ``kernel[1, 256](x, n).submit_on(stream)`` goes.

The launch suite reports ~30 us per submission on the H200 where an awaited tiny
kernel costs ~16 us in all: this times build and submit separately, in chunks of 4096
(as the suite does), with the cyclic GC on and off, with the driver real and stubbed,
and a raw cuda.bindings launch + cuStreamWriteValue32 loop for the device's own
throughput; then cProfile's top functions of the real submissions.
"""

import cProfile
import gc
import pstats
import sys
import time

import numpy as np

import cuasync
from cuasync._backends import get_backend
from cuasync._core.completion import get_hub
from cuasync.bench._breakdown import stubbed_driver
from cuasync.bench.launch import bump

CHUNK = 4096
dev = cuasync.Device(0)
stream = dev.new_stream()
x = cuasync.zeros((256,), "float32").sync_on(stream)
bump[1, 256](x, 256).sync_on(stream)


def chunk(label: str) -> None:
    build, submit, held = [], [], []
    clock = time.perf_counter_ns
    for _ in range(CHUNK):
        t0 = clock()
        op = bump[1, 256](x, 256)
        t1 = clock()
        held.append(op.submit_on(stream))
        t2 = clock()
        build.append(t1 - t0)
        submit.append(t2 - t1)
    t = clock()
    for f in held:
        f.wait()
    drain = (clock() - t) / CHUNK / 1e3
    b, s = np.array(build) / 1e3, np.array(submit) / 1e3
    print(
        f"{label:28s} build p50 {np.median(b):6.2f}  submit p50 {np.median(s):6.2f} "
        f"first/last 512 {np.median(s[:512]):6.2f}/{np.median(s[-512:]):6.2f}  "
        f"mean {s.mean():6.2f} us; wait after {drain:6.2f} us/op"
    )


for _ in range(2):
    chunk("real, gc on")
gc.disable()
chunk("real, gc off")
gc.enable()
with stubbed_driver():
    chunk("stubbed, gc on")
print("gc counts", gc.get_count(), "objects tracked", len(gc.get_objects()))

if get_backend().driver_handles:
    import ctypes

    from cuda.bindings import driver as d

    function = bump._prepare(dev).handle
    ptr, n = ctypes.c_uint64(x.ptr), ctypes.c_int32(256)
    params = (ctypes.c_void_p * 2)(ctypes.addressof(ptr), ctypes.addressof(n))
    addr, h = ctypes.addressof(params), stream.handle
    hub = get_hub()
    slot, word, value = hub.claim_word()
    hub.release_word(slot, value)
    for label, with_flag in (("raw launch", False), ("raw launch + write_value32", True)):
        t0 = time.perf_counter_ns()
        for _ in range(CHUNK):
            d.cuLaunchKernel(function, 1, 1, 1, 256, 1, 1, 0, h, addr, 0)
            if with_flag:
                d.cuStreamWriteValue32(h, word, value, 0)
        t1 = time.perf_counter_ns()
        stream.synchronize()
        t2 = time.perf_counter_ns()
        print(
            f"{label:28s} host {(t1 - t0) / CHUNK / 1e3:6.2f} us/op, "
            f"device done after {(t2 - t0) / CHUNK / 1e3:6.2f} us/op"
        )

profile = cProfile.Profile()
profile.enable()
chunk("real, profiled")
profile.disable()
stats = pstats.Stats(profile, stream=sys.stdout)
print(f"{stats.total_calls / CHUNK:.1f} calls per op (submit and wait)")
stats.sort_stats("tottime").print_stats(20)
