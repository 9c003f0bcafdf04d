"""Where the host time of a 4 KiB ``from_host`` goes, beside torch's and a raw copy.

The transfers suite measured ``await cuasync.from_host(4 KiB)`` at ~48 us on the H200
where torch's pageable ``copy_`` + synchronize takes 11-13 us and an awaited tiny
kernel ~22 us on the same host; small uploads now take an express path
(``cuasync._small_upload``). This times, p50 over N calls each:

- the whole op, awaited (asyncio) and ``.sync()``;
- torch ``dst.copy_(src)`` + synchronize, and raw cuda.bindings
  (``cuMemcpyHtoDAsync`` pageable + ``cuStreamSynchronize``; the same with an
  alloc/free from the default pool around it);
- cuasync's pieces: an ``Allocation`` made and dropped (stream-ordered alloc + free),
  the pinned staging block (acquire, memcpy, give back) and the per-call time spent in
  each function of the path (wrapped timers, so their own overhead is included).

Run on a GPU: ``python3 tools/probes/small_upload.py`` (after ``pip install -e .``).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

import cuasync
from cuasync import _small_upload
from cuasync._backends import get_backend
from cuasync._core import completion, memory, op
from cuasync._transfers import copies as _copies
from cuasync._transfers import pageable as _pageable
from cuasync._transfers import staging as _staging

N = 2000
SIZE = 4096
host = np.ones(SIZE // 4, np.float32)


def p50(samples: list[int]) -> float:
    return float(np.median(samples)) / 1000


def timed(fn: Callable[[], Any], n: int = N) -> list[int]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(n + 100):
        t0 = clock()
        fn()
        out.append(clock() - t0)
    return out[100:]


async def awaited(n: int = N) -> list[int]:
    clock = time.perf_counter_ns
    out = []
    for _ in range(n + 100):
        t0 = clock()
        t = await cuasync.from_host(host)
        out.append(clock() - t0)
        del t
    return out[100:]


def row(label: str, us: float) -> None:
    print(f"  {label:<62} p50 {us:8.1f} us")


def baselines() -> None:
    print("-- baselines")
    try:
        import torch

        src, dst = torch.ones(SIZE // 4), torch.empty(SIZE // 4, device="cuda")

        def copy() -> None:
            dst.copy_(src)
            torch.cuda.synchronize()

        def to_cuda() -> None:
            src.to("cuda")
            torch.cuda.synchronize()

        row("torch dst.copy_(pageable src) + synchronize", p50(timed(copy)))
        row("torch src.to('cuda') + synchronize (allocates)", p50(timed(to_cuda)))
    except ImportError:
        print("  (torch is not installed)")
    if cuasync.backend_name() != "cuda":
        print("  (the raw driver rows need the cuda backend)")
        return
    from cuda.bindings import driver as d

    stream = cuasync.Device(0).new_stream()
    h = stream.handle
    err, dptr = d.cuMemAlloc(SIZE)
    assert not err, err
    src = host.ctypes.data

    def copy_sync() -> None:
        d.cuMemcpyHtoDAsync(dptr, src, SIZE, h)
        d.cuStreamSynchronize(h)

    def alloc_copy_free() -> None:
        _, p = d.cuMemAllocAsync(SIZE, h)
        d.cuMemcpyHtoDAsync(p, src, SIZE, h)
        d.cuMemFreeAsync(p, h)
        d.cuStreamSynchronize(h)

    row("raw cuMemcpyHtoDAsync pageable + cuStreamSynchronize", p50(timed(copy_sync)))
    row("raw cuMemAllocAsync + HtoD pageable + cuMemFreeAsync + sync", p50(timed(alloc_copy_free)))


def pieces() -> None:
    print("-- cuasync pieces")
    dev = cuasync.Device(0)
    stream = dev.new_stream()
    made = p50(timed(lambda: memory.Allocation(dev, SIZE, stream)))
    row("Allocation(dev, 4 KiB, stream) made and dropped", made)
    pool = _staging.staging_pool()

    def stage() -> None:
        block = pool.acquire(SIZE)
        np.copyto(block.scratch(SIZE).view(np.float32), host)
        del block

    row("staging block: acquire + memcpy + give back", p50(timed(stage)))
    for label, run in (
        ("from_host(4 KiB).sync()", lambda: p50(timed(lambda: cuasync.from_host(host).sync()))),
        ("asyncio: await from_host(4 KiB)", lambda: p50(asyncio.run(awaited()))),
    ):
        before = cuasync.stats()
        us = run()
        after = cuasync.stats()
        paths = (
            f"inline {after.completed_inline - before.completed_inline}, "
            f"blocking {after.completed_blocking - before.completed_blocking}, "
            f"reactor {after.completed_reactor - before.completed_reactor}"
        )
        print(f"  {label:<62} p50 {us:8.1f} us  ({paths})")


def per_function() -> None:
    print("-- mean host time per call inside the awaited path (wrapped timers)")
    spent: dict[str, list[int]] = defaultdict(list)
    targets = [
        (cuasync, "from_host"),
        (_small_upload, "enqueue"),
        (_copies, "new_tensor"),
        (_pageable, "upload_single"),
        (completion.Hub, "attach"),
        (completion.Hub, "settle"),
        (completion.Completion, "finish"),
        (op.DeviceOp, "_start"),
        (memory.Allocation, "__init__"),
        (memory.Allocation, "__del__"),
        (type(get_backend()), "memcpy_htod_async"),
        (type(get_backend()), "write_value32"),
    ]
    originals = []
    for owner, name in targets:
        fn = getattr(owner, name)
        originals.append((owner, name, fn))

        def wrap(fn: Callable[..., Any], key: str) -> Callable[..., Any]:
            @functools.wraps(fn)
            def timed_call(*args: Any, **kw: Any) -> Any:
                t0 = time.perf_counter_ns()
                try:
                    return fn(*args, **kw)
                finally:
                    spent[key].append(time.perf_counter_ns() - t0)

            return timed_call

        setattr(owner, name, wrap(fn, f"{getattr(owner, '__name__', owner)}.{name}"))
    try:
        samples = asyncio.run(awaited())
    finally:
        for owner, name, fn in originals:
            setattr(owner, name, fn)
    row("asyncio: await from_host(4 KiB), wrapped", p50(samples))
    for key, values in spent.items():
        print(f"  {key:<62} {np.mean(values) / 1000:8.2f} us x {len(values) / (N + 100):.2f}/op")


def main() -> None:
    info = cuasync.stats()
    print(f"backend={cuasync.backend_name()} native={info.native}")
    asyncio.run(awaited(200))  # warm: pools, staging, kernels
    baselines()
    pieces()
    per_function()


if __name__ == "__main__":
    main()
