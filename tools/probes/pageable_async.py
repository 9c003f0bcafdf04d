"""What does cuMemcpyHtoDAsync do with a pageable source, on a stream that is held?

The driver API's "API synchronization behavior" page says an Async copy between device
and pageable host memory "might be synchronous with respect to host" and that the driver
"may synchronize with the stream" to stage it. cuasync's from_host therefore never hands
the driver a numpy array's address (cuasync/_transfers/pageable.py). This probe measures what this
driver does, for each size:

1. the stream is held by cuStreamWaitValue32 on a pinned host word that a timer thread
   writes after HOLD_S seconds; the main thread then calls cuMemcpyHtoDAsync from a
   pageable buffer and times the call: about HOLD_S means it waited for the stream (on an
   event loop: blocked until the held work ran, a deadlock if the loop itself had to
   release it);
2. right after the call returns the source is overwritten; once the stream ran, the
   device copy says whether the driver had read the source before returning;
3. the same timing for cuMemcpyDtoHAsync into pageable memory.

Run on a GPU machine: ``python3 tools/probes/pageable_async.py``.
"""

import ctypes
import threading
import time

import numpy as np
from cuda.bindings import driver as d

HOLD_S = 0.5
SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]


def check(res):
    err = res[0] if isinstance(res, tuple) else res
    if int(err):
        raise RuntimeError(f"driver error {err}")
    return res[1] if isinstance(res, tuple) and len(res) == 2 else res


def main():
    check(d.cuInit(0))
    dev = check(d.cuDeviceGet(0))
    ctx = check(d.cuDevicePrimaryCtxRetain(dev))
    check(d.cuCtxSetCurrent(ctx))
    stream = check(d.cuStreamCreate(1))  # non-blocking, as cuasync's
    word_host = int(check(d.cuMemHostAlloc(4, 0x02)))  # DEVICEMAP
    word_dev = int(check(d.cuMemHostGetDevicePointer(word_host, 0)))
    word = ctypes.c_uint32.from_address(word_host)
    generation = 0
    print(f"hold {HOLD_S} s; a call that waited for the stream takes about that long")
    for n in SIZES:
        dptr = int(check(d.cuMemAlloc(n)))
        for direction in ("HtoD", "DtoH"):
            generation += 1
            value = generation
            check(d.cuStreamWaitValue32(stream, word_dev, value, 0))  # GEQ
            timer = threading.Timer(HOLD_S, lambda v=value: setattr(word, "value", v))
            timer.start()
            src = np.full(n, 7, np.uint8)
            t0 = time.perf_counter()
            if direction == "HtoD":
                check(d.cuMemcpyHtoDAsync(dptr, src.ctypes.data, n, stream))
            else:
                check(d.cuMemcpyDtoHAsync(src.ctypes.data, dptr, n, stream))
            took = time.perf_counter() - t0
            held = word.value < value
            if direction == "HtoD":
                src[:] = 9  # after the call returned: does the device see this?
            timer.join()
            check(d.cuStreamSynchronize(stream))
            verdict = ""
            if direction == "HtoD":
                back = np.empty(n, np.uint8)
                check(d.cuMemcpyDtoH(back.ctypes.data, dptr, n))
                verdict = (
                    "source read before return"
                    if (back == 7).all()
                    else "source read AFTER return"
                    if (back == 9).all()
                    else "source read part before, part after return"
                )
            print(
                f"{direction} {n >> 10:>7} KiB pageable: call took {took * 1e3:8.2f} ms, "
                f"{'returned while the stream was held' if held else 'waited for the stream'}"
                f"{'; ' + verdict if verdict else ''}",
                flush=True,
            )
        check(d.cuMemFree(dptr))


if __name__ == "__main__":
    main()
