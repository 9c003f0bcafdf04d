"""How many commands can be enqueued behind a closed cuStreamWaitValue32 gate before an
enqueue call blocks, with and without host functions between them?"""

import ctypes
import subprocess
import sys


def child(variant):
    from cuda.bindings import driver as d

    import cuasync._reactor as r

    d.cuInit(0)
    _, dev = d.cuDeviceGet(0)
    _, ctx = d.cuDevicePrimaryCtxRetain(dev)
    d.cuCtxSetCurrent(ctx)
    _, s = d.cuStreamCreate(1)
    _, word = d.cuMemAllocHost(64)
    ctypes.c_uint32.from_address(int(word)).value = 0
    _, dword = d.cuMemHostGetDevicePointer(word, 0)
    _, pinned = d.cuMemAllocHost(1 << 20)
    _, dptr = d.cuMemAlloc(1 << 20)
    d.cuStreamWaitValue32(s, dword, 1, 0)  # GEQ
    for i in range(20000):
        print(i, flush=True)
        if variant in ("copy", "copy+hostfn"):
            d.cuMemcpyDtoHAsync(int(pinned) + 16 * (i % 4096), dptr, 16, s)
        if variant in ("hostfn", "copy+hostfn"):
            d.cuLaunchHostFunc(s, r.HOST_SIGNAL_FN, i + 1)
        if variant == "htod+dtoh+hostfn":
            d.cuMemcpyHtoDAsync(dptr, int(pinned), 24, s)
            d.cuMemcpyDtoHAsync(int(pinned) + 64, dptr, 24, s)
            d.cuLaunchHostFunc(s, r.HOST_SIGNAL_FN, i + 1)
    print("never blocked", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        child(sys.argv[1])
        sys.exit(0)
    for v in ["copy", "hostfn", "copy+hostfn", "htod+dtoh+hostfn"]:
        p = subprocess.Popen([sys.executable, __file__, v], stdout=subprocess.PIPE, text=True)
        try:
            out, _ = p.communicate(timeout=8)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            lines = out.split()
            print(f"{v:18s}: enqueue BLOCKED at iteration {lines[-1] if lines else '?'}")
            continue
        print(f"{v:18s}: {out.split(chr(10))[-2]}")
