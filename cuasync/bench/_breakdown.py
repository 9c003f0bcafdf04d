"""Where the host time of one tiny-kernel op goes: build, submit, await, resolve.

Each step is timed alone (p50 over ``n`` ops), with the driver's launch and flag write
real and then stubbed: stubbed, a launch does nothing and the flag is written by the
host itself (the completion lands at once), so what remains is cuasync's own Python.
The difference between the two is what the driver calls cost from Python.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import cuasync
from cuasync._backends import get_backend
from cuasync._core.completion import get_hub

from ._util import Report, await_latency, run_loop

SUITE = "completion"


@contextmanager
def stubbed_driver() -> Iterator[bool]:
    """Launches do nothing and flags are written by the host; yields False when the
    native module (which writes the flag) is missing, and then stubs nothing.

    Where the backend launches natively (``Backend.fast_launch``: CUDA with the native
    module), the native module's own entry points are swapped for its stub table
    (``_reactor.stub_entry_points``), so the native path runs as it does for real, less
    the driver; the backend's Python launch and flag write are stubbed beside it. The
    stub table's copy copies nothing: a small upload made inside the block lands no data.
    """
    hub = get_hub()
    native = hub.native
    if native is None or not hub.use_reactor:
        yield False
        return
    backend = get_backend()
    store = native.store32

    def write_value32(stream: int, address: int, value: int) -> None:
        store(address, value)

    def launch_kernel(*args: Any) -> None:
        if len(args) > 7 and args[7]:  # a launch fused with its completion's flag write
            store(args[7], args[8])

    def queue_launch(*args: Any) -> None:
        return None  # (bursts launch, stubbed, on the loop thread)

    native_launch = backend.fast_launch is not None and backend.fast_launch is getattr(
        native, "launch_packed", None
    )
    restore = getattr(backend, "_native_entry_points", None)
    if native_launch and restore is not None:
        native.set_entry_points(**native.stub_entry_points())
    backend.launch_kernel = launch_kernel  # type: ignore[method-assign,assignment]
    backend.write_value32 = write_value32  # type: ignore[method-assign]
    backend.queue_launch = queue_launch  # type: ignore[method-assign,assignment]
    try:
        yield True
    finally:
        del backend.launch_kernel, backend.write_value32, backend.queue_launch
        if native_launch and restore is not None:
            restore()  # the driver's own entry points again


def _per_op(step: Callable[[Any], Any], items: list[Any]) -> tuple[list[int], list[Any]]:
    clock = time.perf_counter_ns
    times, out = [], []
    for item in items:
        t0 = clock()
        out.append(step(item))
        times.append(clock() - t0)
    return times, out


def _steps(report: Report, label: str, kernel: Any, stream: cuasync.Stream, n: int) -> None:
    build, ops = _per_op(lambda _: kernel[1, 32](), [None] * n)
    submit, futures = _per_op(lambda op: op.submit_on(stream), ops)
    stream.synchronize()
    for fut in futures:
        fut.wait()
    resolve, _ = _per_op(lambda fut: fut.result(), futures)
    report.latency(SUITE, f"op build: kernel[1, 32]() ({label})", build)
    report.latency(SUITE, f"submit: op.submit_on(stream) ({label})", submit)
    report.latency(SUITE, f"resolve: a finished future's result() ({label})", resolve)


def run(report: Report, kernel: Any, stream: cuasync.Stream, n: int) -> None:
    """Print the breakdown rows (a kernel taking no arguments, compiled already)."""
    print("-- cost breakdown of one tiny-kernel op (host time)")
    _steps(report, "driver real", kernel, stream, n)
    with stubbed_driver() as stubbed:
        if not stubbed:
            print("  (no native module: the stubbed rows need it to write flags)")
            return
        _steps(report, "driver stubbed", kernel, stream, n)
        for kind in ("asyncio", "uvloop"):
            try:
                samples = run_loop(kind, lambda: await_latency(kernel, n, stream))
            except ImportError:
                continue
            report.latency(SUITE, f"{kind}: whole await, driver stubbed (inline)", samples)
    for kind in ("asyncio", "uvloop"):
        rows = {
            r.name.rsplit(", ", 1)[1]: r.p50_us
            for r in report.rows
            if r.name.startswith(f"{kind}: cuasync await tiny kernel, ") and r.p50_us
        }
        inline = next(
            (v for k, v in rows.items() if k.startswith("spin ") and k != "spin 0 (reactor)"), None
        )
        reactor = rows.get("woken by the reactor") or rows.get("spin 0 (reactor)")
        if inline is not None and reactor is not None:
            report.value(
                SUITE,
                f"{kind}: wake through the reactor, over an inline finish",
                reactor - inline,
                "us",
            )
