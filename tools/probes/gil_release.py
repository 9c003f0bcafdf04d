"""Does cuda.bindings release the GIL in driver calls that wait for the device?

For each call: a Python host function (ctypes) sleeps 0.3 s on the stream, then the
main thread makes the call. If the binding holds the GIL, the host function can never
start (it needs the GIL) and the call never returns: a deadlock, reported after 5 s.
"""

import ctypes
import faulthandler
import subprocess
import sys
import time

CALLS = [
    "cuStreamSynchronize",
    "cuEventSynchronize",
    "cuCtxSynchronize",
    "cuMemFreeHost",
    "cuMemFree",
    "cuMemcpyDtoHAsync(pageable)",
    "cuMemcpyHtoDAsync(pageable)",
    "cuModuleLoadData",
    "cuStreamDestroy",
    "cuStreamQuery",
    "cuMemAllocHost",
]


def child(name):
    from cuda.bindings import driver as d

    faulthandler.dump_traceback_later(5, exit=True)
    d.cuInit(0)
    _, dev = d.cuDeviceGet(0)
    _, ctx = d.cuDevicePrimaryCtxRetain(dev)
    d.cuCtxSetCurrent(ctx)
    _, s = d.cuStreamCreate(0)
    _, ev = d.cuEventCreate(0)
    _, host = d.cuMemAllocHost(64)
    _, dptr = d.cuMemAlloc(64)
    ran = []

    def hf(_):
        time.sleep(0.3)
        ran.append(1)

    cb = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(hf)
    addr = ctypes.cast(cb, ctypes.c_void_p).value
    d.cuLaunchHostFunc(s, addr, 0)
    d.cuEventRecord(ev, s)
    t = time.monotonic()
    if name == "cuStreamSynchronize":
        r = d.cuStreamSynchronize(s)
    elif name == "cuEventSynchronize":
        r = d.cuEventSynchronize(ev)
    elif name == "cuCtxSynchronize":
        r = d.cuCtxSynchronize()
    elif name == "cuMemFreeHost":
        r = d.cuMemFreeHost(host)
    elif name == "cuMemFree":
        r = d.cuMemFree(dptr)
    elif name == "cuMemcpyDtoHAsync(pageable)":
        buf = bytearray(64)
        c = (ctypes.c_char * 64).from_buffer(buf)
        r = d.cuMemcpyDtoHAsync(ctypes.addressof(c), dptr, 64, s)
    elif name == "cuMemcpyHtoDAsync(pageable)":
        buf = bytearray(64)
        c = (ctypes.c_char * 64).from_buffer(buf)
        r = d.cuMemcpyHtoDAsync(dptr, ctypes.addressof(c), 64, s)
    elif name == "cuStreamDestroy":
        r = d.cuStreamDestroy(s)
    elif name == "cuStreamQuery":
        r = d.cuStreamQuery(s)
    elif name == "cuMemAllocHost":
        r = d.cuMemAllocHost(1 << 20)
    elif name == "cuModuleLoadData":
        ptx = b".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n\0"
        r = d.cuModuleLoadData(ptx)
    dt = time.monotonic() - t
    result = r[0] if isinstance(r, tuple) else r
    print(f"{name:22s} returned {result} after {dt * 1e3:7.1f} ms; host fn done: {bool(ran)}")
    d.cuCtxSynchronize()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        child(sys.argv[1])
        sys.exit(0)
    for name in CALLS:
        r = subprocess.run(
            [sys.executable, __file__, name], capture_output=True, text=True, timeout=30
        )
        print(
            r.stdout.strip() or f"{name:22s} DEADLOCK (no return in 5 s: the GIL is held)",
            (r.stderr.strip().splitlines() or [""])[0] if r.returncode else "",
        )
