"""Where a small matmul's cuBLAS call spends its host time (issue 32 item 1, ``matmul``):
the entry points cuasync could call for a (64, 64) @ (64, 64) float32 product, each
called N times through ctypes on one stream (p50 of the call alone, a synchronize every
50), its result checked once against numpy:

- ``cublasGemmStridedBatchedEx``, as ``cublas.Blas.gemm`` calls it (23 arguments), and the
  same with m = n = k = 0 (cuBLAS returns at once: what ctypes and the argument checks
  cost);
- ``cublasSgemm_v2`` (the legacy entry point, 14 arguments);
- ``cublasLtMatmul`` with its descriptors, layouts and algorithm made once (what "cuBLAS
  handle and descriptors cached" means: no heuristic per call);
- ``cublasGetVersion_v2`` (two arguments): the floor of a ctypes call into cuBLAS;
- ``torch.mm`` (no synchronize), its own C++ path to cuBLAS(Lt), where torch is there.

    CUASYNC_BACKEND=cuda python3 tools/probes/cublas_calls.py
"""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import cuasync
from cuasync._backends import cublas, get_backend
from cuasync._backends.cublaslt import _Heuristic as HeuristicResult
from cuasync._backends.nvlib import open_nvidia

N = 2000
SIZE = 64
p, i, i64, u64, sz = (
    ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_uint64, ctypes.c_size_t
)  # fmt: skip


def timed(call: Callable[[], Any], stream: cuasync.Stream) -> float:
    """p50 in us of ``call()`` alone, N times, a synchronize every 50."""
    clock = time.perf_counter_ns
    out = []
    for k in range(N):
        t0 = clock()
        call()
        out.append(clock() - t0)
        if k % 50 == 49:
            stream.synchronize()
    stream.synchronize()
    return statistics.median(out) / 1000


def check(status: int, what: str) -> None:
    if status:
        raise RuntimeError(f"{what}: status {status}")


def main() -> None:
    if cuasync.backend_name() != "cuda":
        print("cublas_calls.py needs the CUDA backend (a GPU and cuBLAS)")
        return
    host_a = np.random.default_rng(0).random((SIZE, SIZE), dtype=np.float32)
    host_b = np.random.default_rng(1).random((SIZE, SIZE), dtype=np.float32)
    want = host_a @ host_b
    a = cuasync.from_host(host_a).sync()
    b = cuasync.from_host(host_b).sync()
    c = cuasync.empty((SIZE, SIZE), "float32").sync()
    stream = cuasync.get_default_device().new_stream()
    cuasync.matmul(a, b).sync_on(stream)  # (cuBLAS loaded, its handle and workspace made)
    backend: Any = get_backend()
    blas = backend._blas
    lib = cublas.load()
    handle = blas.handle(0)
    ws, ws_bytes = blas.workspace(stream.handle, True)
    check(lib.cublasSetStream_v2(handle, stream.handle), "cublasSetStream")
    check(lib.cublasSetWorkspace_v2(handle, ws, ws_bytes), "cublasSetWorkspace")
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    # row-major c = a @ b is column-major c^T = b^T a^T: cuBLAS's A is b, its B is a
    rows: dict[str, float] = {}

    def verify(name: str) -> None:
        got = c.to_host().sync()
        ok = np.allclose(got, want, rtol=1e-4, atol=1e-4)
        print(f"  ({name}: result {'right' if ok else 'WRONG'})", flush=True)

    def ex(m: int = SIZE) -> int:
        return lib.cublasGemmStridedBatchedEx(
            handle, 0, 0, m, m, m, ctypes.byref(one), b.ptr, 0, SIZE, SIZE * SIZE,
            a.ptr, 0, SIZE, SIZE * SIZE, ctypes.byref(zero), c.ptr, 0, SIZE, SIZE * SIZE,
            1, 68, -1,
        )  # fmt: skip

    sections: list[tuple[str, Callable[[], Callable[[], Any]]]] = []

    def section(name: str) -> Callable[[Callable[[], Callable[[], Any]]], None]:
        def add(make: Callable[[], Callable[[], Any]]) -> None:
            sections.append((name, make))

        return add

    @section("cublasGemmStridedBatchedEx (cuasync's call)")
    def _ex() -> Callable[[], Any]:
        check(ex(), "GemmStridedBatchedEx")
        return ex

    @section("cublasGemmStridedBatchedEx, m = n = k = 0")
    def _ex0() -> Callable[[], Any]:
        check(ex(0), "GemmStridedBatchedEx(0)")
        return lambda: ex(0)

    @section("cublasSgemm_v2")
    def _sgemm() -> Callable[[], Any]:
        fn = lib.cublasSgemm_v2
        fn.argtypes = [p, i, i, i, i, i, p, p, i, p, i, p, p, i]
        fn.restype = i
        ra, rb = ctypes.byref(one), ctypes.byref(zero)

        def call() -> int:
            return fn(handle, 0, 0, SIZE, SIZE, SIZE, ra, b.ptr, SIZE, a.ptr, SIZE, rb, c.ptr, SIZE)

        check(call(), "Sgemm")
        return call

    @section("cublasLtMatmul, descriptors and algorithm made once")
    def _lt() -> Callable[[], Any]:
        lt = open_nvidia("cublasLt")
        lt.cublasLtCreate.argtypes = [ctypes.POINTER(p)]
        lt.cublasLtMatmulDescCreate.argtypes = [ctypes.POINTER(p), i, i]
        lt.cublasLtMatrixLayoutCreate.argtypes = [ctypes.POINTER(p), i, u64, u64, i64]
        lt.cublasLtMatmulPreferenceCreate.argtypes = [ctypes.POINTER(p)]
        lt.cublasLtMatmulPreferenceSetAttribute.argtypes = [p, i, p, sz]
        lt.cublasLtMatmulAlgoGetHeuristic.argtypes = [
            p,
            p,
            p,
            p,
            p,
            p,
            p,
            i,
            ctypes.POINTER(HeuristicResult),
            ctypes.POINTER(i),
        ]
        lt.cublasLtMatmul.argtypes = [p, p, p, p, p, p, p, p, p, p, p, p, p, p, sz, p]
        for name in (
            "cublasLtCreate", "cublasLtMatmulDescCreate", "cublasLtMatrixLayoutCreate",
            "cublasLtMatmulPreferenceCreate", "cublasLtMatmulPreferenceSetAttribute",
            "cublasLtMatmulAlgoGetHeuristic", "cublasLtMatmul",
        ):  # fmt: skip
            getattr(lt, name).restype = i
        lh, desc, layout, pref = p(), p(), p(), p()
        check(lt.cublasLtCreate(ctypes.byref(lh)), "cublasLtCreate")
        check(lt.cublasLtMatmulDescCreate(ctypes.byref(desc), 68, 0), "MatmulDescCreate")
        check(lt.cublasLtMatrixLayoutCreate(ctypes.byref(layout), 0, SIZE, SIZE, SIZE), "Layout")
        check(lt.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "PreferenceCreate")
        limit = ctypes.c_uint64(ws_bytes)
        check(
            lt.cublasLtMatmulPreferenceSetAttribute(pref, 1, ctypes.byref(limit), 8),
            "PreferenceSetAttribute",
        )
        result, found = HeuristicResult(), i(0)
        check(
            lt.cublasLtMatmulAlgoGetHeuristic(
                lh, desc, layout, layout, layout, layout, pref, 1, ctypes.byref(result),
                ctypes.byref(found),
            ),
            "AlgoGetHeuristic",
        )  # fmt: skip
        if not found.value:
            raise RuntimeError("no algorithm")
        algo = ctypes.byref(result.algo)
        ra, rb = ctypes.byref(one), ctypes.byref(zero)
        fn, sh = lt.cublasLtMatmul, stream.handle

        def call() -> int:
            return fn(
                lh, desc, ra, b.ptr, layout, a.ptr, layout, rb, c.ptr, layout, c.ptr, layout,
                algo, ws, ws_bytes, sh,
            )  # fmt: skip

        check(call(), "cublasLtMatmul")
        return call

    @section("cublasGetVersion_v2 (a ctypes call's floor)")
    def _version() -> Callable[[], Any]:
        fn = lib.cublasGetVersion_v2
        fn.argtypes = [p, ctypes.POINTER(i)]
        fn.restype = i
        v = i(0)
        ref = ctypes.byref(v)
        return lambda: fn(handle, ref)

    for name, make in sections:
        try:
            c = cuasync.zeros((SIZE, SIZE), "float32").sync()  # (each entry point's own)
            call = make()
            if "GetVersion" not in name and "= 0" not in name:
                stream.synchronize()
                verify(name)
            rows[name] = timed(call, stream)
            print(f"{name:<56}{rows[name]:7.1f} us", flush=True)
        except Exception as exc:  # (one entry point missing must not hide the others)
            print(f"{name:<56} failed: {type(exc).__name__}: {exc}", flush=True)
    try:
        import torch

        ta = torch.from_numpy(host_a).cuda()
        tb = torch.from_numpy(host_b).cuda()
        torch.mm(ta, tb)
        torch.cuda.synchronize()
        clock = time.perf_counter_ns
        out = []
        for k in range(N):
            t0 = clock()
            torch.mm(ta, tb)
            out.append(clock() - t0)
            if k % 50 == 49:
                torch.cuda.synchronize()
        print(f"{'torch.mm (no synchronize)':<56}{statistics.median(out) / 1000:7.1f} us")
    except Exception as exc:
        print(f"torch.mm failed: {type(exc).__name__}: {exc}")


if __name__ == "__main__":
    main()
