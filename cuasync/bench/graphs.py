"""``graphs``: replaying 100 tiny kernels from a CUDA graph vs launching them eagerly.

Host microseconds per kernel (the time to enqueue) and end-to-end time to run all 100,
for: eager cuasync ops, one cuasync op of 100 launches (``zip``), raw ``cuda.bindings``
launches, and a cuasync graph replay.
"""

from __future__ import annotations

import time

import cuasync
from cuasync._backends import get_backend

from ._util import Report
from .launch import bump

SUITE = "graphs"


def _best(fn, reps: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fn()
        best = min(best, time.perf_counter_ns() - t0)
    return best / 1e3


def run(report: Report, kernels: int = 100, reps: int = 50) -> None:
    print(f"== graphs ({cuasync.backend_name()}: {cuasync.Device(0).name})", flush=True)
    stream = cuasync.Device(0).new_stream()
    x = cuasync.zeros((256,), "float32").sync_on(stream)
    bump.compile()
    with cuasync.CudaGraph.scope(stream) as scope:
        for _ in range(kernels):
            scope.record(bump[1, 256](x, 256))
    graph = scope.graph
    assert graph is not None
    graph.launch().sync_on(stream)

    def eager_enqueue() -> None:
        futures = [bump[1, 256](x, 256).submit_on(stream) for _ in range(kernels)]
        futures[-1].wait()

    def zip_enqueue() -> None:
        cuasync.zip(*(bump[1, 256](x, 256) for _ in range(kernels))).sync_on(stream)

    def graph_enqueue() -> None:
        graph.launch().sync_on(stream)

    # host cost: time to enqueue only
    def host_only(make) -> float:  # type: ignore[no-untyped-def]
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter_ns()
            make()
            best = min(best, time.perf_counter_ns() - t0)
            stream.synchronize()
        return best / 1e3 / kernels

    eager_host = host_only(lambda: [bump[1, 256](x, 256).submit_on(stream) for _ in range(kernels)])
    zip_host = host_only(
        lambda: cuasync.zip(*(bump[1, 256](x, 256) for _ in range(kernels))).submit_on(stream)
    )
    graph_host = host_only(lambda: graph.launch().submit_on(stream))
    report.value(SUITE, f"eager: {kernels} ops, host per kernel", eager_host, "us")
    report.value(SUITE, f"zip: one op of {kernels} launches, host per kernel", zip_host, "us")
    report.value(SUITE, f"graph replay of {kernels} kernels, host per kernel", graph_host, "us")
    if get_backend().driver_handles:
        import ctypes

        from cuda.bindings import driver as d

        function = bump._prepare(stream.device).handle
        ptr, n = ctypes.c_uint64(x.ptr), ctypes.c_int32(256)
        params = (ctypes.c_void_p * 2)(ctypes.addressof(ptr), ctypes.addressof(n))
        addr, h = ctypes.addressof(params), stream.handle

        def raw() -> None:
            for _ in range(kernels):
                d.cuLaunchKernel(function, 1, 1, 1, 256, 1, 1, 0, h, addr, 0)

        report.value(
            SUITE, f"raw cuda.bindings: {kernels} launches, host per kernel", host_only(raw), "us"
        )
    report.value(SUITE, "eager host / graph host (goal >= 10)", eager_host / graph_host, "x")
    report.value(SUITE, f"end to end: eager {kernels} ops", _best(eager_enqueue, reps), "us")
    report.value(SUITE, f"end to end: zip of {kernels}", _best(zip_enqueue, reps), "us")
    report.value(SUITE, f"end to end: graph replay of {kernels}", _best(graph_enqueue, reps), "us")
