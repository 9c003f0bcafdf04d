"""Where the host time of one tiny-kernel op goes: build, submit, await, resolve.

Each step is timed alone (p50 over ``n`` ops), with the driver's launch and flag write
real and then stubbed: stubbed, a launch does nothing and the flag is written by the
host itself (the completion lands at once), so what remains is cuasync's own Python.
The difference between the two is what the driver calls cost from Python.

With the driver stubbed, the build and submission of a seen elementwise expression
(``cuasync.add(x, 1.0)``, ``cuasync.exp(x * 2.0 + 1.0, out=o)``, x (1024,) float32) and
of a seen reduction (``cuasync.sum(x)``) is timed beside the raw launch of its own kernel
with the same arguments, in turns, and put in ratio (target ``<= 1.5``): what the
tensor-op layer adds above a launch. A seen ``cuasync.matmul(m, m)`` (64 x 64 float32) is
timed beside them with the backend's GEMM stubbed too (no kernel to compare it with).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

import cuasync
from cuasync._backends import get_backend
from cuasync._core.completion import get_hub
from cuasync._launch.kernel import NULL_POINTER
from cuasync._ops import codegen, launch_plan

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
    own_launch = backend.launch_kernel  # (a field of the native base: set back, not deleted)
    backend.launch_kernel = launch_kernel
    backend.write_value32 = write_value32  # type: ignore[method-assign]
    backend.queue_launch = queue_launch  # type: ignore[method-assign,assignment]
    try:
        yield True
    finally:
        backend.launch_kernel = own_launch
        del backend.write_value32, backend.queue_launch
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
        _expressions(report, stream, n)
        for kind in ("asyncio", "uvloop"):
            try:
                samples = run_loop(kind, lambda: await_latency(kernel, n, stream))
            except ImportError:
                continue
            report.latency(SUITE, f"{kind}: whole await, driver stubbed (inline)", samples)
    if not cuasync.stats().reactor:  # (host callbacks: no reactor wakes anything)
        print("  (no reactor in this mode: no 'wake through the reactor' rows)")
        return
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


def raw_launch_of(op: Any, out: Callable[[], cuasync.Tensor]) -> Callable[[], Any]:
    """The raw launch of the elementwise ``op``'s kernel (contiguous float32) with its
    arguments, into ``out()`` (``op`` is taken: it only names the kernel and arguments)."""
    op._take()
    plan, tensors, scalars = codegen.make_plan(op._node)
    kernel = codegen.kernel_for(plan, "float32", 0)
    size = op.size
    launch = kernel[1, 256]  # (a grid-stride loop: any grid)
    return lambda: launch(out(), *tensors, *scalars, size, 1)


def raw_reduction_of(
    op: Any, out: Callable[[], cuasync.Tensor], stream: cuasync.Stream
) -> Callable[[], Any]:
    """The raw launch of the kernel the seen reduction ``op`` launches, with its
    arguments, into ``out()`` (``op`` is taken: its launch op only names them)."""
    op._take()
    launch = launch_plan.express_launch(op, stream)
    assert launch is not None, "the reduction is not one launch of a seen plan"
    launch._take()
    kernel = launch._kernel
    launcher = kernel[launch._grid, launch._block]
    args = [  # (the output replaced, the cancel word the launcher's own; a null pointer
        NULL_POINTER if p.pointer and not isinstance(a, cuasync.Tensor) else a  # (the
        for p, a in zip(kernel.params[1:], launch._args[1:-1], strict=False)  # Python
    ]  # path's op holds it as 0)
    return lambda: launcher(out(), *args)


def _expressions(report: Report, stream: cuasync.Stream, n: int, turn: int = 50) -> None:
    """Build + ``submit_on`` of seen expressions beside the raw launch of their kernel
    (driver stubbed), in turns of ``turn`` ops, and their ratios (target <= 1.5); a seen
    matmul's beside them, its GEMM stubbed."""
    x = cuasync.from_host(np.arange(1024, dtype=np.float32)).sync()
    o = cuasync.empty((1024,), "float32").sync()
    m = cuasync.from_host(np.ones((64, 64), np.float32)).sync()
    s = cuasync.empty((), "float32").sync()
    for _ in range(2):  # (seen: plans made, kernels prepared)
        cuasync.sum(x).sync()
        cuasync.matmul(m, m).sync()
    rows: dict[str, Callable[[], Any]] = {
        "raw launch of add's kernel: k[1, 256](o, x, 1.0, 1024, 1)": raw_launch_of(
            cuasync.add(x, 1.0), lambda: o
        ),
        "cuasync.add(x, 1.0, out=o)": lambda: cuasync.add(x, 1.0, out=o),
        "cuasync.add(x, 1.0)": lambda: cuasync.add(x, 1.0),
        "raw launch of exp(x * 2.0 + 1.0)'s kernel": raw_launch_of(
            cuasync.exp(x * 2.0 + 1.0), lambda: o
        ),
        "cuasync.exp(x * 2.0 + 1.0, out=o)": lambda: cuasync.exp(x * 2.0 + 1.0, out=o),
        "raw launch of sum(x)'s kernel": raw_reduction_of(cuasync.sum(x), lambda: s, stream),
        "cuasync.sum(x)": lambda: cuasync.sum(x),
        "cuasync.matmul(m, m), 64 x 64 float32, its GEMM stubbed": lambda: cuasync.matmul(m, m),
    }
    backend = get_backend()
    backend.gemm = lambda *args: None  # type: ignore[method-assign]  # (put back below)
    try:
        _alternate(report, rows, stream, n, turn)
    finally:
        del backend.gemm


def _alternate(
    report: Report, rows: dict[str, Callable[[], Any]], stream: cuasync.Stream, n: int, turn: int
) -> None:
    """Time ``rows`` in turns (see :func:`_expressions`) and put each op in ratio to the
    raw launch of its kernel, the row before it whose name starts with "raw"."""
    clock = time.perf_counter_ns
    samples: dict[str, list[int]] = {name: [] for name in rows}
    for make in rows.values():  # warm: plans made, pools at their sizes
        for _ in range(turn):
            make().submit_on(stream)
    stream.synchronize()
    for _ in range(0, n, turn):
        for name, make in rows.items():
            futures = []
            times = samples[name]
            for _ in range(turn):
                t0 = clock()
                futures.append(make().submit_on(stream))
                times.append(clock() - t0)
            stream.synchronize()
            del futures
    p50 = {
        name: report.latency(SUITE, f"build + submit_on: {name} (driver stubbed)", t).p50_us
        for name, t in samples.items()
    }
    raw = None
    for name, value in p50.items():
        if name.startswith("raw"):
            raw = value
            continue
        if raw and value and "stubbed" not in name:
            report.value(
                SUITE,
                f"{name} / its raw launch, driver stubbed (target <= 1.5)",
                value / raw,
                "x",
            )
