"""``launch``: host cost of enqueuing one kernel launch.

Raw ``cuda.bindings`` ``cuLaunchKernel``, CuPy ``RawKernel`` and cuasync, in one process:
cuasync per submitted op (launch + completion flag) and per launch inside one op.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

import cuasync
from cuasync._backends import get_backend

from ._util import BLOCK, Report, interleaved

SUITE = "launch"

SOURCE = r"""
extern "C" __global__ void cuasync_bump(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
"""


def _emulate(x: np.ndarray, n: int) -> None:
    x[:n] += 1


bump = cuasync.Kernel(SOURCE, "cuasync_bump", emulate=_emulate)


def _each_call(fn, count: int) -> list[int]:  # type: ignore[no-untyped-def]
    """Nanoseconds of each of ``count`` calls."""
    clock, out = time.perf_counter_ns, []
    for _ in range(count):
        t0 = clock()
        fn()
        out.append(clock() - t0)
    return out


def _both(report: Report, name: str, samples: list[int], note: str = "") -> float:
    """A latency row (p50: the host cost of one call) and a mean row (what a long run of
    calls pays, pauses included); returns the p50 in microseconds."""
    row = report.latency(SUITE, name, samples, note)
    report.value(SUITE, f"{name}, mean", float(np.mean(samples)) / 1e3, "us/launch")
    return row.p50_us or 0.0


def run(report: Report, count: int = 20000) -> None:
    print(f"== launch ({cuasync.backend_name()}: {cuasync.Device(0).name})", flush=True)
    dev = cuasync.Device(0)
    stream = dev.new_stream()
    x = cuasync.zeros((256,), "float32").sync_on(stream)
    bump.compile()
    raw: Callable[[], object] | None = None
    if get_backend().driver_handles:
        import ctypes

        from cuda.bindings import driver as d

        function = bump._prepare(dev).handle
        ptr, n = ctypes.c_uint64(x.ptr), ctypes.c_int32(256)
        params = (ctypes.c_void_p * 2)(ctypes.addressof(ptr), ctypes.addressof(n))
        addr, h = ctypes.addressof(params), stream.handle

        def raw() -> None:
            d.cuLaunchKernel(function, 1, 1, 1, 256, 1, 1, 0, h, addr, 0)

    # Each future is waited after its turn, outside the timing (a future holds its
    # completion slot until then).
    held: list[cuasync.DeviceFuture] = []

    def submit() -> None:
        held.append(bump[1, 256](x, 256).submit_on(stream))

    def drain() -> None:
        for f in held:
            f.wait()
        held.clear()
        stream.synchronize()

    chain = 100

    def many() -> None:
        cuasync.zip(*(bump[1, 256](x, 256) for _ in range(chain))).submit_on(stream)

    # The raw launch and cuasync's, interleaved (see _util.interleaved): their ratio is
    # a target.
    candidates: dict[str, Callable[[], object]] = {"cuasync": submit}
    if raw is not None:
        candidates["raw"] = raw
    samples = interleaved(candidates, count, between=drain)
    raw_p50 = 0.0
    if raw is not None:
        raw_p50 = _both(report, "raw cuda.bindings cuLaunchKernel", samples["raw"])
        try:
            import cupy

            k = cupy.RawKernel(SOURCE, "cuasync_bump")
            a = cupy.zeros(256, dtype=cupy.float32)
            st = cupy.cuda.Stream(non_blocking=True)
            with st:
                k((1,), (256,), (a, np.int32(256)))
                st.synchronize()
                cupy_samples = _each_call(lambda: k((1,), (256,), (a, np.int32(256))), count)
                st.synchronize()
            _both(report, f"cupy {cupy.__version__} RawKernel call", cupy_samples)
        except ImportError:
            pass
    p50 = _both(
        report,
        "cuasync: kernel[1, 256](x, n).submit_on(stream)",
        samples["cuasync"],
        "op + launch + completion flag"
        + (f"; interleaved with the raw launch in turns of {BLOCK}" if raw else ""),
    )
    reps = max(count // chain, 1)
    zipped = interleaved({"zip": many, **({"raw": raw} if raw else {})}, reps, block=2, warmup=3)
    us = float(np.mean(zipped["zip"])) / 1e3 / chain
    stream.synchronize()
    report.value(
        SUITE,
        f"cuasync: {chain} launches in one zip op",
        us,
        "us/launch",
        "mean; interleaved with the raw launch" if raw else "",
    )
    if raw_p50:
        zip_raw = float(np.percentile(zipped["raw"], 50)) / 1e3
        print("-- targets (ratios inside this run)")
        name = "submit_on p50 / raw cuLaunchKernel p50 (target <= 2)"
        report.value(SUITE, name, p50 / raw_p50, "x")
        report.value(SUITE, "per launch in a zip / raw p50 (target <= 1.3)", us / zip_raw, "x")
