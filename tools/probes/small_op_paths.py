"""Where an awaited small op's time goes (issue 32 item 1): each row awaits one op 2000
times on asyncio and prints its p50, the completion path its awaits took (``cuasync.stats``:
inline spin, reactor, host callback) and, beside it, the p50 of building and submitting
the same op without waiting (``submit_on``, then one synchronize per 50), the same with
the driver stubbed (``bench._breakdown.stubbed_driver``: on a GPU, what the real driver
adds to the host's work is the difference), and of its ``.sync()``. The ops: a raw
launch of a tiny kernel, ``cuasync.add(x, 1.0)`` (a new output), ``cuasync.add(x, 1.0,
out=o)``, the raw launch of add's own kernel into ``o``, ``cuasync.exp(x * 2.0 + 1.0,
out=o)``, ``cuasync.sum(x)``, ``cuasync.matmul(m, m)`` (the tiled kernel's one launch) and
``cuasync.matmul(mb, mb)`` (cuBLAS's); x (1024,) float32, m (64, 64) and mb (160, 160)
float32. Then the backend's GEMM alone, called again with the arguments the submission of
``matmul(mb, mb)`` gave it: what of a cuBLAS product's host time is the library call's;
and on a GPU each step of that call (the submitter's fence, the context switch, ``plan``,
each cuBLAS call through ctypes and the cuBLASLt call from C).

    CUASYNC_BACKEND=cuda python3 tools/probes/small_op_paths.py
    CUASYNC_BACKEND=cuda python3 tools/probes/small_op_paths.py profile sum matmul

``profile NAME...``: the functions taking the most time (``cProfile``, own time) over 2000
``submit_on`` of each named op (``add``, ``add_out``, ``exp_out``, ``sum``, ``matmul``,
``matmul_cublas``).
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import cuasync
from cuasync._backends import get_backend
from cuasync.bench._breakdown import raw_launch_of, stubbed_driver

N = 2000


def _p50(samples: list[int]) -> float:
    return statistics.median(samples) / 1000


async def _awaited(make: Callable[[], Any]) -> list[int]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(N):
        t0 = clock()
        await make()
        out.append(clock() - t0)
    return out


def _submitted(make: Callable[[], Any], stream: cuasync.Stream) -> list[int]:
    clock = time.perf_counter_ns
    out = []
    for i in range(N):
        t0 = clock()
        make().submit_on(stream)
        out.append(clock() - t0)
        if i % 50 == 49:
            stream.synchronize()
    stream.synchronize()
    return out


def _synced(make: Callable[[], Any]) -> list[int]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(N):
        t0 = clock()
        make().sync()
        out.append(clock() - t0)
    return out


def _gemm_alone(m: cuasync.Tensor, stream: cuasync.Stream) -> list[int]:
    """The backend's ``gemm`` called N times with the arguments a seen ``matmul(m, m)``
    on ``stream`` gave it (``m`` too large for the tiled kernel; its result written each
    time; a synchronize every 50)."""
    backend = get_backend()
    gemm = backend.gemm
    given: list[tuple[Any, ...]] = []

    def spy(*args: Any) -> None:
        given.append(args)
        gemm(*args)

    backend.gemm = spy  # type: ignore[method-assign,assignment]
    try:
        cuasync.matmul(m, m).sync_on(stream)
    finally:
        del backend.gemm
    clock = time.perf_counter_ns
    out = []
    for i in range(N):
        t0 = clock()
        gemm(*given[0])
        out.append(clock() - t0)
        if i % 50 == 49:
            stream.synchronize()
    stream.synchronize()
    return out


def _gemm_parts(m: cuasync.Tensor, stream: cuasync.Stream) -> dict[str, float]:
    """p50 (us) of each step of the backend's gemm for a seen ``matmul(m, m)`` on a GPU:
    the submitter's fence, the context switch, and each cuBLAS call through ctypes (each
    timed inside N whole gemms); {} off the CUDA backend."""
    backend = get_backend()
    blas = getattr(backend, "_blas", None)
    if blas is None:
        return {}
    from cuasync._backends import cublas

    lib = cublas.load()
    clock = time.perf_counter_ns
    times: dict[str, list[int]] = {}

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            t0 = clock()
            try:
                return fn(*args)
            finally:
                times.setdefault(name, []).append(clock() - t0)

        return call

    from cuasync._backends import cublaslt

    calls = ("cublasSetStream_v2", "cublasSetWorkspace_v2", "cublasGemmStridedBatchedEx")
    saved = {name: getattr(lib, name) for name in calls}
    for name in calls:
        setattr(lib, name, timed(name, saved[name]))
    lt_matmul = cublaslt.LtKind.matmul  # (cublasLtMatmul, called from C)
    setattr(cublaslt.LtKind, "matmul", timed("LtKind.matmul (cublasLtMatmul from C)", lt_matmul))  # noqa: B010
    parts = {"plan": cublas.plan, "Blas.gemm": blas.gemm}
    try:
        cublas.plan = timed("plan", parts["plan"])  # type: ignore[assignment]
        blas.gemm = timed("Blas.gemm", parts["Blas.gemm"])
        _gemm_alone(m, stream)
    finally:
        for name in calls:
            setattr(lib, name, saved[name])
        setattr(cublaslt.LtKind, "matmul", lt_matmul)  # noqa: B010
        cublas.plan = parts["plan"]  # type: ignore[assignment]
        del blas.gemm
    submitter = getattr(backend, "_submitter", None)
    if submitter is not None:
        for _ in range(N):
            t0 = clock()
            submitter.fence()
            times.setdefault("submitter.fence", []).append(clock() - t0)
    for _ in range(N):
        t0 = clock()
        _, caller = backend._enter(stream.handle)
        if caller is not None:
            backend._put_back(caller)
        times.setdefault("backend._enter", []).append(clock() - t0)
    return {name: _p50(ns) for name, ns in times.items()}


def _profile(names: list[str]) -> None:
    x = cuasync.from_host(np.arange(1024, dtype=np.float32)).sync()
    o = cuasync.empty((1024,), "float32").sync()
    m = cuasync.from_host(np.ones((64, 64), dtype=np.float32)).sync()
    mb = cuasync.from_host(np.ones((160, 160), dtype=np.float32)).sync()  # (above SMALL_MACS)
    stream = cuasync.get_default_device().new_stream()
    ops: dict[str, Callable[[], Any]] = {
        "add": lambda: cuasync.add(x, 1.0),
        "add_out": lambda: cuasync.add(x, 1.0, out=o),
        "exp_out": lambda: cuasync.exp(x * 2.0 + 1.0, out=o),
        "sum": lambda: cuasync.sum(x),
        "matmul": lambda: cuasync.matmul(m, m),
        "matmul_cublas": lambda: cuasync.matmul(mb, mb),
    }
    for name in names:
        make = ops[name]
        for _ in range(100):
            make().sync()
        profile = cProfile.Profile()
        profile.enable()
        _submitted(make, stream)
        profile.disable()
        print(f"== {name}: 2000 x submit_on, by own time")
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


def main() -> None:
    if sys.argv[1:2] == ["profile"]:
        _profile(sys.argv[2:])
        return
    x = cuasync.from_host(np.arange(1024, dtype=np.float32)).sync()
    o = cuasync.empty((1024,), "float32").sync()
    m = cuasync.from_host(np.ones((64, 64), dtype=np.float32)).sync()
    mb = cuasync.from_host(np.ones((160, 160), dtype=np.float32)).sync()  # (above SMALL_MACS)
    stream = cuasync.get_default_device().new_stream()
    from cuasync.bench.completion import tiny

    rows: dict[str, Callable[[], Any]] = {
        "tiny[1, 32]()": lambda: tiny[1, 32](),
        "cuasync.add(x, 1.0)": lambda: cuasync.add(x, 1.0),
        "cuasync.add(x, 1.0, out=o)": lambda: cuasync.add(x, 1.0, out=o),
        "raw launch of add's kernel into o": raw_launch_of(cuasync.add(x, 1.0), lambda: o),
        "cuasync.exp(x * 2.0 + 1.0, out=o)": lambda: cuasync.exp(x * 2.0 + 1.0, out=o),
        "cuasync.sum(x)": lambda: cuasync.sum(x),
        "cuasync.matmul(m, m)": lambda: cuasync.matmul(m, m),
        "cuasync.matmul(mb, mb) (cuBLAS)": lambda: cuasync.matmul(mb, mb),
    }
    for make in rows.values():  # (compiled, planned, pools warm)
        for _ in range(100):
            make().sync()
    header = f"{'op':<36}{'await':>9}{'submit':>9}{'stubbed':>9}{'sync':>9}"
    print(f"{header}   paths of the awaits")
    for name, make in rows.items():
        before = cuasync.stats()
        awaited = asyncio.run(_awaited(make))
        after = cuasync.stats()
        paths = (
            f"inline {after.completed_inline - before.completed_inline}, "
            f"reactor {after.completed_reactor - before.completed_reactor}, "
            f"callback {after.completed_host_callback - before.completed_host_callback}"
        )
        submitted, synced = _submitted(make, stream), _synced(make)
        with stubbed_driver():  # the same submissions, the driver doing nothing
            stubbed = _submitted(make, stream)
        print(
            f"{name:<36}{_p50(awaited):>7.1f}us{_p50(submitted):>7.1f}us"
            f"{_p50(stubbed):>7.1f}us{_p50(synced):>7.1f}us   {paths}"
        )
    alone = _gemm_alone(mb, stream)
    print(f"{'the backend gemm of matmul(mb, mb)':<36}{'':>9}{_p50(alone):>7.1f}us   (alone)")
    for part, us in _gemm_parts(mb, stream).items():
        print(f"  of which {part:<27}{'':>9}{us:>7.1f}us")


if __name__ == "__main__":
    main()
