"""The host cost of the native op core itself, against the native module's stub driver.

With ``_reactor.stub_entry_points()`` installed, a native launch reaches no driver (the
launch is counted, the flag stored at once), so what is timed is cuasync's own path:
the op build, the core's submission and settling, and a whole ``await``. On the
emulator the backend has no native launch; this probe gives it one for the duration
(``fast_launch`` = ``launch_packed``, the kernel's handle and layout, a current device),
so the CI host measures the same C path a GPU takes. p50 over N each, asyncio and
uvloop, beside an empty coroutine's await and a plain C call for scale.

Run: ``python3 tools/probes/core_cost.py`` (any backend, after ``pip install -e .``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

import cuasync
from cuasync._backends import get_backend
from cuasync._backends._params import _layout
from cuasync._core.completion import get_hub
from cuasync.bench._util import run_loop, timed
from cuasync.bench.completion import tiny
from cuasync.bench.launch import bump

N = 20000


def p50_ns(samples: list[int]) -> float:
    return float(np.median(samples))


def each(fn: Callable[[], object], n: int = N) -> list[int]:
    """ns of each of ``n`` calls of ``fn`` (the bench's ``timed``, no warm-up)."""
    return timed(fn, n, warmup=0)


@contextmanager
def native_stub() -> Iterator[None]:
    """Native launches against the stub table (given to the emulator for the block)."""
    hub, backend = get_hub(), get_backend()
    native = hub.native
    real = getattr(backend, "_native_entry_points", None)
    saved = {k: backend.__dict__.get(k) for k in ("fast_launch", "current")}
    prepared = {k: (k._prepare(cuasync.Device(0)), None) for k in (tiny, bump)}
    if backend.fast_launch is None:  # the emulator: a native launch for this probe
        backend.fast_launch = native.launch_packed
        backend.current = native.CurrentOrdinal()  # (as CUDA's)
        backend.current.ordinal = 0
        for kernel, (p, _) in prepared.items():
            codes = ["Q", "i"] if kernel is bump else []
            prepared[kernel] = (p, p.fast)
            p.fast = (1, _layout(codes, [0] if codes else []))
    native.set_entry_points(**native.stub_entry_points())
    try:
        yield
    finally:
        if real is not None:
            real()
        else:
            native.set_entry_points()
        for k, v in saved.items():
            if v is None:
                backend.__dict__.pop(k, None)
            else:
                setattr(backend, k, v)
        for p, fast in prepared.values():
            if fast is not None or p.fast is not None:
                p.fast = fast


async def awaits(kernel_call: Callable[[], object], stream: cuasync.Stream) -> list[int]:
    clock, out = time.perf_counter_ns, []
    with cuasync.use_policy(cuasync.SingleStream(stream)):
        for i in range(N + 100):
            t0 = clock()
            await kernel_call()  # type: ignore[misc]
            if i >= 100:
                out.append(clock() - t0)
    return out


async def empty() -> list[int]:
    async def nothing() -> None:
        return None

    clock, out = time.perf_counter_ns, []
    for _ in range(N):
        t0 = clock()
        await nothing()
        out.append(clock() - t0)
    return out


def main() -> None:
    hub = get_hub()
    stream = cuasync.Device(0).new_stream()
    x = cuasync.zeros((256,), "float32").sync_on(stream)
    tiny[1, 32]().sync_on(stream)
    bump[1, 256](x, 256).sync_on(stream)
    core = hub.express
    print(f"backend={cuasync.backend_name()} native core={core is not None}")
    if core is None:
        return
    rows: list[tuple[str, float]] = []
    rows.append(("a C call (len(()))", p50_ns(each(lambda: len(())))))
    for kind in ("asyncio", "uvloop"):
        rows.append((f"{kind}: await of an empty coroutine", p50_ns(run_loop(kind, empty))))
    with native_stub():
        before, stubbed = core.native_launches, hub.native.stub_launches()
        futures: list[cuasync.DeviceFuture] = []

        def taken(op: cuasync.DeviceOp[object]) -> None:
            op._consumed = True  # built only: never executed

        steps: dict[str, Callable[[], object]] = {
            "build tiny[1, 32]()": lambda: taken(tiny[1, 32]()),
            "build bump[1, 256](x, n)": lambda: taken(bump[1, 256](x, 256)),
            "bump[1, 256](x, n).sync_on(stream)": lambda: bump[1, 256](x, 256).sync_on(stream),
            "bump[1, 256](x, n).submit_on(stream)": lambda: futures.append(
                bump[1, 256](x, 256).submit_on(stream)
            ),
        }
        for name, step in steps.items():
            rows.append((name, p50_ns(each(step, N // 2))))  # (submits: within the slots)
            for f in futures:
                f.wait()
            futures.clear()
        for kind in ("asyncio", "uvloop"):
            for name, call in (
                ("tiny[1, 32]()", lambda: tiny[1, 32]()),
                ("bump[1, 256](x, n)", lambda: bump[1, 256](x, 256)),
            ):
                samples = run_loop(kind, lambda: awaits(call, stream))  # noqa: B023
                rows.append((f"{kind}: await {name}", p50_ns(samples)))
        native = core.native_launches - before
        reached = hub.native.stub_launches() - stubbed
    print(f"native launches {native}, of them reaching the stub {reached}")
    for name, ns in rows:
        print(f"  {name:<48} p50 {ns / 1000:7.2f} us")


if __name__ == "__main__":
    main()
