"""The express path with and without the backend's native launch, alternated in one process.

``Backend.fast_launch`` lets the express path call the native launch + flag write itself
instead of through ``CudaBackend.launch_kernel`` (one Python frame less before every
launch). This times, p50 over N each, in rounds that alternate the two (so that the VM's
drift falls on both alike): an awaited tiny kernel on asyncio and uvloop, its raw
cuda.bindings launch + synchronize beside it, and ``kernel[1, 256](x, n).submit_on``
beside a raw ``cuLaunchKernel``.

Run on a GPU: ``python3 tools/probes/express_ab.py`` (after ``pip install -e .``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np

import cuasync
from cuasync._backends import get_backend
from cuasync.bench._util import await_latency, run_loop, timed
from cuasync.bench.completion import _raw_launcher, tiny
from cuasync.bench.launch import bump

N = 2000
ROUNDS = 3


def p50(samples: list[int]) -> float:
    return float(np.median(samples)) / 1000


def each(fn: Callable[[], object], n: int = N) -> list[int]:
    """ns of each of ``n`` calls of ``fn`` (the bench's ``timed``, no warm-up)."""
    return timed(fn, n, warmup=0)


def main() -> None:
    backend = get_backend()
    native = backend.fast_launch
    print(f"backend={cuasync.backend_name()} native launch={native is not None}")
    stream = cuasync.Device(0).new_stream()
    tiny.compile()
    x = cuasync.zeros((256,), "float32").sync_on(stream)
    bump[1, 256](x, 256).sync_on(stream)
    raw = _raw_launcher(stream)
    rows: dict[str, list[float]] = {}

    def row(name: str, us: float) -> None:
        rows.setdefault(name, []).append(us)

    for _ in range(ROUNDS):
        if raw is not None:
            launch, sync = raw
            row("raw launch + cuStreamSynchronize", p50(each(lambda: (launch(), sync()))))  # noqa: B023
            from cuda.bindings import driver as d

            fn = bump._prepare(cuasync.Device(0)).handle
            ptr, n = ctypes.c_uint64(x.ptr), ctypes.c_int32(256)
            params = (ctypes.c_void_p * 2)(ctypes.addressof(ptr), ctypes.addressof(n))
            addr, h = ctypes.addressof(params), stream.handle
            row(
                "raw cuLaunchKernel",
                p50(each(lambda: d.cuLaunchKernel(fn, 1, 1, 1, 256, 1, 1, 0, h, addr, 0))),  # noqa: B023
            )
            stream.synchronize()
        for label, fast in (("native launch", native), ("through launch_kernel", None)):
            backend.fast_launch = fast
            for kind in ("asyncio", "uvloop"):
                samples = run_loop(kind, lambda: await_latency(tiny, N, stream))
                row(f"{kind} await tiny[1, 32](), {label}", p50(samples))
            held: list[cuasync.DeviceFuture] = []
            samples = each(lambda: held.append(bump[1, 256](x, 256).submit_on(stream)))  # noqa: B023
            for f in held:
                f.wait()
            row(f"bump[1, 256](x, n).submit_on(stream), {label}", p50(samples))
        backend.fast_launch = native
    for name, values in rows.items():
        print(f"  {name:<58} p50 " + " ".join(f"{v:6.2f}" for v in values) + " us")


if __name__ == "__main__":
    main()
